/// Kiosk enrollment (docs/ENROLLMENT.md): workflows declared in the daemon's config, run one at a time by
/// `EnrollmentEngine`, with every step's completion committed to SQLite before the next step starts.
public enum Enrollment {}
