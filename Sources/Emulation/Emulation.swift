/// Emulated cards for tests and the lab: the eMRTD chip built from a document profile.
