/// The station's page, served from the binary (no CDN, no file from the network). The page is a thin renderer:
/// every screen comes from the bridge's view (`KioskSession.view`), drawn with DOM calls (never HTML from data).
/// Hooks: each screen's root has `data-step` (the step key, `start`, `done`, `error`), inputs are named after the
/// step's fields, the primary button is `data-action="continue"`.
enum KioskAssets {
    static let html = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Enrollment station</title>
        <link rel="stylesheet" href="/kiosk.css">
        <script src="/kiosk.js" defer></script>
        </head>
        <body>
        <main id="app" aria-live="polite"><section class="screen" data-step="connecting"><h1>Starting…</h1></section></main>
        </body>
        </html>
        """#

    static let style = #"""
        :root { font-size: 24px; font-family: system-ui, sans-serif; color: #111; background: #f4f4f1; }
        body { margin: 0; }
        main { max-width: 48rem; margin: 0 auto; padding: 1.5rem; }
        h1 { font-size: 2rem; margin: 0.5rem 0 1rem; }
        p { line-height: 1.4; }
        .screen { display: flex; flex-direction: column; gap: 1rem; }
        label { display: flex; flex-direction: column; gap: 0.3rem; font-weight: 600; }
        label.check { flex-direction: row; align-items: center; gap: 0.8rem; }
        input, textarea, select { font-size: 1.2rem; padding: 0.6rem; border: 2px solid #555; border-radius: 0.4rem; }
        input[type=checkbox] { width: 2rem; height: 2rem; }
        textarea[name=mrz] { font-family: ui-monospace, monospace; text-transform: uppercase; letter-spacing: 0.05em; }
        button { font-size: 1.2rem; min-height: 3.5rem; min-width: 10rem; padding: 0.6rem 1.4rem; border-radius: 0.6rem;
          border: 2px solid #0b4f8a; background: #fff; color: #0b4f8a; cursor: pointer; }
        button.primary { background: #0b4f8a; color: #fff; }
        button:disabled { opacity: 0.45; }
        button:focus-visible, input:focus-visible, textarea:focus-visible { outline: 4px solid #f0a500; }
        .buttons { display: flex; flex-wrap: wrap; gap: 1rem; }
        .tabs { display: flex; flex-wrap: wrap; gap: 0.5rem; }
        .tabs button[aria-pressed=true] { background: #0b4f8a; color: #fff; }
        .error { color: #a00000; font-weight: 600; }
        .hint { background: #fff6d6; padding: 0.8rem; border-radius: 0.4rem; }
        .checkline { min-height: 1.5rem; }
        .checkline.ok { color: #116611; }
        .files { list-style: none; padding: 0; display: flex; flex-direction: column; gap: 0.4rem; }
        .files progress { width: 100%; height: 1.2rem; }
        .faces { display: flex; gap: 1rem; flex-wrap: wrap; }
        .faces figure { margin: 0; }
        .faces img, video { width: 18rem; max-width: 100%; border-radius: 0.4rem; background: #ddd; }
        .challenge { font-size: 1.6rem; font-weight: 700; }
        .spinner { width: 3rem; height: 3rem; border: 0.4rem solid #ccc; border-top-color: #0b4f8a; border-radius: 50%;
          animation: spin 1s linear infinite; }
        @keyframes spin { to { transform: rotate(360deg); } }
        """#

    static let script = #"""
        'use strict';
        // The station's page: draws the bridge's views and posts the person's actions. Personal data lives only in
        // this page's memory and is dropped whenever the view goes back to the start screen.
        (function () {
          const app = document.getElementById('app');
          let view = null;
          let capture = null;     // the last camera capture: {mediaType, data}
          let stream = null;      // the camera while the camera screen shows
          let alternative = 0;    // the chosen alternative of the form on screen
          let lastTouch = 0;

          function el(tag, attrs, ...children) {
            const e = document.createElement(tag);
            for (const [k, v] of Object.entries(attrs || {})) {
              if (v === undefined || v === null || v === false) continue;
              if (k === 'text') e.textContent = v;
              else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
              else e.setAttribute(k, v === true ? '' : String(v));
            }
            for (const c of children) if (c) e.append(c);
            return e;
          }

          async function post(path, body) {
            const r = await fetch(path, {method: 'POST', headers: {'content-type': 'application/json'},
                                         body: JSON.stringify(body)});
            return r.json();
          }
          const act = (body) => post('/api/action', body);

          function touch() {
            const now = Date.now();
            if (now - lastTouch > 3000) { lastTouch = now; act({action: 'touch'}).catch(() => {}); }
          }
          ['pointerdown', 'keydown', 'input'].forEach((t) => document.addEventListener(t, touch, true));

          function stopCamera() {
            if (stream) { stream.getTracks().forEach((t) => t.stop()); stream = null; }
          }

          function wipe() {
            stopCamera();
            capture = null;
            alternative = 0;
          }

          function screen(v, ...children) {
            return el('section', {class: 'screen', 'data-step': v.screen, 'data-kind': v.kind}, ...children);
          }

          function buttons(...bs) { return el('div', {class: 'buttons'}, ...bs); }
          function cancelButton() {
            return el('button', {type: 'button', 'data-action': 'cancel', text: 'Cancel',
                                 onclick: () => act({action: 'cancel'})});
          }

          // ---- start ----
          function drawStart(v) {
            const token = el('input', {name: 'activationToken', autocomplete: 'off', 'aria-label': 'Activation code (optional)'});
            const start = el('button', {type: 'submit', class: 'primary', 'data-action': 'continue', text: 'Start'});
            const form = el('form', {onsubmit: async (e) => {
              e.preventDefault();
              start.disabled = true;
              const r = await act({action: 'start', activationToken: token.value});
              if (r.error) { start.disabled = false; showError(form, r.error); }
            }}, el('label', {}, 'Activation code (optional)', token), buttons(start));
            return screen(v, el('h1', {text: 'Welcome'}),
              v.notice ? el('p', {class: 'hint', 'data-notice': true, text: v.notice}) : null,
              el('p', {text: 'Enroll a passkey with your identity document. Touch Start to begin.'}), form);
          }

          // ---- working ----
          function drawWorking(v) {
            return screen(v, el('h1', {text: 'Please wait…'}), el('div', {class: 'spinner', role: 'progressbar'}),
              buttons(cancelButton()));
          }

          // ---- place your document ----
          function drawDocument(v) {
            const list = el('ul', {class: 'files'});
            const status = el('p', {class: 'status', 'data-progress': true});
            const s = screen(v, el('h1', {text: 'Place your document on the reader'}),
              el('p', {text: 'Lay the photo page (or the card) flat on the reader and leave it there until the read is complete.'}),
              status, list, buttons(cancelButton()));
            updateDocument(s, v);
            return s;
          }
          function updateDocument(s, v) {
            const p = v.progress || {};
            const status = s.querySelector('[data-progress]');
            status.textContent = p.waitingForCard ? 'Waiting for the document…' : (p.current || 'Reading…');
            status.setAttribute('data-progress', p.waitingForCard ? 'waitingForCard' : 'reading');
            const list = s.querySelector('.files');
            list.replaceChildren(...(p.files || []).map((f) => {
              const done = f.totalBytes > 0 && f.bytesRead >= f.totalBytes;
              return el('li', {'data-file': f.file, 'data-done': done ? 'true' : 'false'},
                el('span', {text: f.file + (done ? ' ✓' : '')}),
                el('progress', {max: f.totalBytes || 1, value: f.bytesRead}));
            }));
          }

          // ---- a step's form ----
          function fieldInput(f) {
            if (f.constant !== undefined && f.kind !== 'boolean') return null;
            if (f.kind === 'boolean') {
              return el('label', {class: 'check'},
                el('input', {type: 'checkbox', name: f.name, required: !f.optional && f.constant === true}), f.label);
            }
            let input;
            if (f.choices.length) {
              input = el('select', {name: f.name, required: !f.optional},
                ...f.choices.map((c) => el('option', {value: c, text: c})));
            } else if (f.name === 'mrz') {
              input = el('textarea', {name: 'mrz', rows: 3, spellcheck: 'false', autocomplete: 'off',
                                      autocapitalize: 'characters', required: true});
            } else {
              const numeric = ['otp', 'pin', 'can'].includes(f.name.toLowerCase()) || f.kind !== 'string';
              input = el('input', {name: f.name, type: f.secret ? 'password' : 'text', autocomplete: 'off',
                                   inputmode: numeric ? 'numeric' : null, required: !f.optional});
            }
            return el('label', {}, f.label + (f.optional ? ' (optional)' : ''), input);
          }

          function fieldValue(form, f) {
            if (f.constant !== undefined && f.kind !== 'boolean') return f.constant;
            const input = form.querySelector('[name="' + f.name + '"]');
            if (!input) return undefined;
            if (f.kind === 'boolean') return input.checked;
            let text = input.value.trim();
            if (f.name === 'mrz') text = text.toUpperCase().split(/\s+/).filter(Boolean).join('\n');
            if (text === '' && f.optional) return undefined;
            if (f.kind === 'integer' || f.kind === 'number') return Number(text);
            return text;
          }

          const accessFields = ['mrz', 'can', 'documentNumber', 'dateOfBirth', 'dateOfExpiry'];

          function drawForm(v) {
            const f = v.form;
            const alts = f.alternatives.length ? f.alternatives : [[]];
            if (alternative >= alts.length) alternative = 0;
            const fields = alts[alternative];
            const go = el('button', {type: 'submit', class: 'primary', 'data-action': 'continue', text: 'Continue'});
            const checkline = el('p', {class: 'checkline', 'data-check': true});
            const form = el('form', {'data-alternative': alternative, novalidate: true});
            form.append(...fields.map(fieldInput).filter(Boolean));
            const checked = fields.some((x) => accessFields.includes(x.name));
            if (checked) {
              form.append(checkline);
              go.disabled = true;
              let asked = 0;
              form.addEventListener('input', async () => {
                const values = {};
                for (const x of fields) { const val = fieldValue(form, x); values[x.name] = val === undefined ? '' : val; }
                const mine = ++asked;
                const r = await post('/api/check', values);
                if (mine !== asked) return;  // an answer to older input
                checkline.textContent = r.valid ? '✓' : (r.message || '');
                checkline.className = 'checkline' + (r.valid ? ' ok' : (r.complete ? ' error' : ''));
                checkline.setAttribute('data-check', r.valid ? 'valid' : (r.complete ? 'invalid' : 'incomplete'));
                go.disabled = !r.valid;
              });
            }
            const more = [];
            if (f.offersResend) {
              more.push(el('button', {type: 'button', 'data-action': 'resend', text: 'Send a new code',
                onclick: () => act({action: 'submit', step: v.screen, payload: {resend: true}})}));
            }
            form.append(el('p', {class: 'error', role: 'alert', 'data-answer-error': true}),
              buttons(go, ...more, cancelButton()));
            form.addEventListener('submit', async (e) => {
              e.preventDefault();
              if (go.disabled) return;
              const payload = {};
              for (const x of fields) {
                const val = fieldValue(form, x);
                if (val !== undefined) payload[x.name] = val;
              }
              go.disabled = true;
              const r = await act({action: 'submit', step: v.screen, payload});
              if (r.error) { go.disabled = false; showError(form, r.error); }
            });
            const details = [];
            if (f.to) details.push('Sent to ' + f.to);
            if (f.attemptsLeft !== undefined) details.push(f.attemptsLeft + ' attempts left');
            if (f.retriesLeft !== undefined) details.push(f.retriesLeft + ' PIN tries left');
            const tabs = alts.length > 1 ? el('div', {class: 'tabs', role: 'group'}, ...alts.map((a, i) =>
              el('button', {type: 'button', 'data-alternative': i, 'aria-pressed': i === alternative ? 'true' : 'false',
                            text: a.filter((x) => !x.optional).map((x) => x.label).join(', ') || 'none',
                            onclick: () => { alternative = i; render(view, true); }}))) : null;
            const s = screen(v, el('h1', {text: f.prompt}),
              details.length ? el('p', {text: details.join(' · ')}) : null, tabs, form);
            updateAnswerError(s, v);
            setTimeout(() => { const first = form.querySelector('input, textarea, select'); if (first) first.focus(); }, 0);
            return s;
          }

          function showError(parent, error) {
            const line = parent.querySelector('[data-answer-error]') || parent.appendChild(el('p', {class: 'error', role: 'alert', 'data-answer-error': true}));
            line.textContent = error.message + (error.attemptsLeft !== undefined ? ' (' + error.attemptsLeft + ' attempts left)' : '');
            line.setAttribute('data-error-code', error.code);
          }
          function updateAnswerError(s, v) {
            const line = s.querySelector('[data-answer-error]');
            if (!line) return;
            if (v.answerError) showError(s, v.answerError);
            else { line.textContent = ''; line.removeAttribute('data-error-code'); }
            const go = s.querySelector('[data-action="continue"]');
            if (go && v.answerError && !s.querySelector('[data-check="incomplete"], [data-check="invalid"]')) go.disabled = false;
          }

          // ---- camera ----
          function drawCamera(v) {
            const f = v.form;
            const video = el('video', {autoplay: true, playsinline: true, muted: true, 'data-camera': true});
            const go = el('button', {type: 'button', class: 'primary', 'data-action': 'continue', text: 'Take photo', disabled: true});
            const status = el('p', {'data-camera-status': true, text: 'Starting the camera…'});
            const actions = {turnLeft: 'Turn your head to the left', turnRight: 'Turn your head to the right', blink: 'Blink'};
            const challenge = Array.isArray(f.challenge) ? el('ol', {class: 'challenge', 'data-challenge': f.challenge.join(' ')},
              ...f.challenge.map((a) => el('li', {text: actions[a] || a}))) : null;
            const extra = (f.alternatives[0] || []);
            const form = el('form', {}, ...extra.map(fieldInput).filter(Boolean));
            go.addEventListener('click', async () => {
              go.disabled = true;
              status.textContent = 'Hold still…';
              const frames = [];
              const count = Array.isArray(f.challenge) ? Math.min(30, 4 * f.challenge.length) : 1;
              for (let i = 0; i < count; i++) {
                if (i) await new Promise((r) => setTimeout(r, 400));
                frames.push(grab(video));
              }
              capture = frames[0];
              const payload = {[f.imageField]: frames};
              for (const x of extra) { const val = fieldValue(form, x); if (val !== undefined) payload[x.name] = val; }
              status.textContent = 'Checking…';
              const r = await act({action: 'submit', step: v.screen, payload});
              if (r.error) { status.textContent = 'Try again.'; go.disabled = false; showError(s, r.error); }
            });
            const s = screen(v, el('h1', {text: f.prompt}),
              el('p', {text: 'Look straight into the camera, without glasses or a hat.'}), challenge, video, status, form,
              el('p', {class: 'error', role: 'alert', 'data-answer-error': true}), buttons(go, cancelButton()));
            navigator.mediaDevices.getUserMedia({video: {width: 640, height: 480}, audio: false}).then((m) => {
              stream = m;
              video.srcObject = m;
              video.onloadeddata = () => { status.textContent = 'Ready.'; go.disabled = false; };
            }).catch((e) => {
              status.textContent = 'The camera is not available (' + e.name + '). Ask staff for help.';
              status.setAttribute('data-camera-status', 'unavailable');
            });
            updateAnswerError(s, v);
            return s;
          }
          function grab(video) {
            const c = document.createElement('canvas');
            c.width = video.videoWidth || 640;
            c.height = video.videoHeight || 480;
            c.getContext('2d').drawImage(video, 0, 0, c.width, c.height);
            const url = c.toDataURL('image/jpeg', 0.92);
            return {mediaType: 'image/jpeg', data: url.slice(url.indexOf(',') + 1)};
          }

          // ---- result ----
          function image(kind, caption, img) {
            if (!img) return null;
            const displayable = ['image/jpeg', 'image/png'].includes(img.mediaType);
            return el('figure', {'data-image': kind},
              displayable ? el('img', {alt: caption, src: 'data:' + img.mediaType + ';base64,' + img.data})
                          : el('p', {text: '(' + img.mediaType + ')'}),
              el('figcaption', {text: caption}));
          }
          function drawDone(v) {
            stopCamera();
            const r = v.result || {};
            const name = [r.givenNames, r.surname].filter(Boolean).join(' ');
            const finish = el('button', {type: 'button', class: 'primary', 'data-action': 'continue', text: 'Finish',
                                         onclick: () => act({action: 'restart'})});
            return screen(v, el('h1', {text: 'You are enrolled'}),
              name ? el('p', {'data-result': 'name', text: name}) : null,
              r.rpId ? el('p', {'data-result': 'rpId', text: 'Passkey for ' + r.rpId}) : null,
              el('div', {class: 'faces'}, image('portrait', 'Chip portrait', v.portrait), image('capture', 'Camera', capture)),
              buttons(finish));
          }

          // ---- error ----
          function drawError(v) {
            stopCamera();
            const e = v.error || {};
            const retry = e.retryable ? el('button', {type: 'button', class: 'primary', 'data-action': 'retry',
              text: 'Try again', onclick: () => act({action: 'retry'})}) : null;
            const again = el('button', {type: 'button', class: retry ? '' : 'primary', 'data-action': 'continue',
              text: retry ? 'Cancel' : 'Start over',
              onclick: async () => { if (e.retryable) await act({action: 'cancel'}); act({action: 'restart'}); }});
            return screen(v, el('h1', {text: e.retryable ? 'That did not work' : 'The enrollment failed'}),
              el('p', {class: 'error', 'data-error-code': e.code, text: e.message}),
              e.hint ? el('p', {class: 'hint', text: e.hint}) : null, buttons(retry, again));
          }

          const draw = {start: drawStart, working: drawWorking, document: drawDocument, form: drawForm,
                        camera: drawCamera, done: drawDone, error: drawError};

          function render(v, force) {
            const old = view;
            if (old && v.version === old.version && !force) return;
            view = v;
            const current = app.firstElementChild;
            const same = old && current && old.screen === v.screen && old.kind === v.kind && !force;
            if (same && v.kind === 'document') return updateDocument(current, v);
            if (same && (v.kind === 'form' || v.kind === 'camera')) return updateAnswerError(current, v);
            if (same && v.kind === 'working') return;
            if (v.screen === 'start') wipe();
            if (v.kind !== 'camera') stopCamera();
            if (!same && !force) alternative = 0;
            app.replaceChildren((draw[v.kind] || drawWorking)(v));
          }

          function connect() {
            const events = new EventSource('/events');
            events.onmessage = (m) => {
              const v = JSON.parse(m.data);
              if (view && v.version < view.version && v.screen !== 'start') return;
              render(v);
            };
            events.onerror = () => {
              if (events.readyState === EventSource.CLOSED) setTimeout(connect, 1000);
            };
          }
          connect();
        })();
        """#
}
