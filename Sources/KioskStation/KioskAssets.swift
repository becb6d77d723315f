/// The station's page, served from the binary (no CDN, no file from the network). The page is a thin renderer:
/// every screen comes from the bridge's view (`KioskSession.view`), drawn with DOM calls (never HTML from data), and
/// every word from the message catalogues (`KioskCatalogues`, `GET /catalogues.json`) in the chosen language, with
/// the workflow's overrides (`view.messages`). Hooks: each screen's root has `data-step` (the step key, `start`,
/// `done`, `error`), inputs are named after the step's fields (a date's parts `NAME-day`, `NAME-month`,
/// `NAME-year`), the buttons carry `data-action` (`continue`, `retry`, `cancel`, `resend`), the language buttons
/// `data-language`.
enum KioskAssets {
    /// The page in `language` (a catalogue's code): `<html lang>` and the title; the language the page returns to
    /// after a wipe is this one.
    static func html(language: String) -> String {
        let title = KioskCatalogues.message("app.title", language: language) ?? "Enrollment station"
        let starting = KioskCatalogues.message("connecting", language: language) ?? "…"
        return page.replacing("{{lang}}", with: escape(language)).replacing("{{title}}", with: escape(title))
            .replacing("{{starting}}", with: escape(starting))
    }

    private static func escape(_ s: String) -> String {
        s.replacing("&", with: "&amp;").replacing("<", with: "&lt;").replacing("\"", with: "&quot;")
    }

    static let page = #"""
        <!doctype html>
        <html lang="{{lang}}" data-default-language="{{lang}}">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}}</title>
        <link rel="stylesheet" href="/kiosk.css">
        <script src="/kiosk.js" defer></script>
        </head>
        <body>
        <div id="announce" class="sr-only" role="status" aria-live="polite" aria-atomic="true"></div>
        <main id="app"><section class="screen" data-step="connecting"><header><h1>{{starting}}</h1></header></section></main>
        </body>
        </html>
        """#

    static let style = #"""
        :root { font-size: clamp(18px, calc(1.1vw + 1.2vh), 28px); font-family: system-ui, sans-serif; color: #111;
          background: #f4f4f1; }
        * { box-sizing: border-box; }
        body { margin: 0; }
        main { max-width: 60rem; margin: 0 auto; }
        .sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
        .screen { display: flex; flex-direction: column; height: 100vh; height: 100dvh; padding: 0 1rem; }
        .screen > header { flex: none; padding-top: 0.6rem; }
        .content { flex: 1 1 auto; min-height: 0; overflow-y: auto; overflow-x: hidden; display: flex;
          flex-direction: column; gap: 0.8rem; padding: 0.3rem 0.3rem 0.8rem; }
        .content:focus-visible { outline: 3px dashed #0b4f8a; outline-offset: -3px; }
        .actions { flex: none; display: flex; flex-wrap: wrap; gap: 1rem; padding: 0.8rem 0.3rem 1rem;
          border-top: 2px solid #d6d6cf; }
        h1 { font-size: 1.7rem; margin: 0.3rem 0 0.4rem; line-height: 1.2; }
        h1:focus { outline: none; }
        p { line-height: 1.4; margin: 0; }
        form { display: flex; flex-direction: column; gap: 0.8rem; }
        label, fieldset > legend { display: flex; flex-direction: column; gap: 0.3rem; font-weight: 600; }
        fieldset { border: none; padding: 0; margin: 0; }
        .date { display: flex; gap: 0.6rem; flex-wrap: wrap; }
        .date label { font-weight: 400; }
        .date input { width: 5.5rem; }
        .date input[data-date-part=year] { width: 7rem; }
        label.check { flex-direction: row; align-items: center; gap: 0.8rem; }
        input, textarea, select { font: inherit; font-size: 1.1rem; padding: 0.5rem; border: 2px solid #555;
          border-radius: 0.4rem; background: #fff; color: #111; max-width: 100%; }
        input[type=checkbox] { width: 2rem; height: 2rem; }
        textarea[name=mrz] { font-family: "OCR B", ui-monospace, monospace; text-transform: uppercase;
          width: 100%; font-size: 0.8rem; resize: none; white-space: pre; overflow-x: auto; }
        button { font: inherit; font-size: 1.1rem; min-height: 3.2rem; min-width: 9rem; padding: 0.5rem 1.2rem;
          border-radius: 0.6rem; border: 2px solid #0b4f8a; background: #fff; color: #0b4f8a; cursor: pointer; }
        button.primary { background: #0b4f8a; color: #fff; }
        button:disabled { opacity: 0.45; cursor: default; }
        :focus-visible { outline: 4px solid #b36b00; outline-offset: 2px; }
        .tabs { display: flex; flex-wrap: wrap; gap: 0.5rem; }
        .tabs button { min-width: 0; }
        .tabs button[aria-pressed=true] { background: #0b4f8a; color: #fff; }
        .languages { display: flex; flex-wrap: wrap; gap: 0.5rem; }
        .languages button { min-width: 7rem; }
        .languages button[aria-pressed=true] { background: #0b4f8a; color: #fff; }
        .error { color: #a00000; font-weight: 600; }
        .error:empty { display: none; }
        .hint { background: #fff6d6; padding: 0.8rem; border-radius: 0.4rem; }
        .checkline { min-height: 1.4rem; }
        .checkline.ok { color: #116611; font-weight: 600; }
        .columns { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.4fr); gap: 1rem; align-items: start; }
        .columns > div { display: flex; flex-direction: column; gap: 0.8rem; min-width: 0; }
        @media (orientation: portrait), (max-width: 900px) { .columns { grid-template-columns: minmax(0, 1fr); } }
        .drawings { display: flex; gap: 0.8rem; flex-wrap: wrap; }
        .drawings img { width: 10rem; max-width: 45%; height: auto; }
        img.drawing { width: 14rem; max-width: 60%; height: auto; }
        .keypad { display: grid; grid-template-columns: repeat(auto-fill, minmax(2.6rem, 1fr)); gap: 0.3rem; }
        .keypad button { min-width: 0; min-height: 2.6rem; padding: 0; font-family: ui-monospace, monospace; }
        .keypad button.wide { grid-column: span 3; font-family: inherit; font-size: 0.9rem; }
        .bar { height: 1.4rem; background: #ddd; border-radius: 0.7rem; overflow: hidden; border: 1px solid #777; }
        .bar > div { height: 100%; background: #0b4f8a; transition: width 0.3s; }
        .stages { list-style: none; padding: 0; margin: 0; display: flex; flex-direction: column; gap: 0.3rem; }
        .stages li { padding-left: 2rem; position: relative; color: #444; }
        .stages li[data-done=true] { color: #116611; }
        .stages li[data-done=true]::before { content: "✓"; position: absolute; left: 0.3rem; }
        .stages li[aria-current=step] { font-weight: 700; color: #111; }
        .stages li[aria-current=step]::before { content: "➜"; position: absolute; left: 0.3rem; }
        .faces { display: flex; gap: 1rem; flex-wrap: wrap; }
        .faces figure { margin: 0; }
        .faces img { width: 14rem; max-width: 100%; border-radius: 0.4rem; background: #ddd; }
        .preview { position: relative; width: 22rem; max-width: 100%; aspect-ratio: 4 / 3; }
        .preview video { width: 100%; height: 100%; object-fit: cover; border-radius: 0.4rem; background: #ddd; display: block; }
        .preview img { position: absolute; inset: 0; width: 100%; height: 100%; pointer-events: none; }
        video.mrz { width: 100%; max-width: 22rem; border-radius: 0.4rem; background: #ddd; }
        .challenge { font-size: 1.4rem; font-weight: 700; margin: 0; }
        .spinner { width: 3rem; height: 3rem; border: 0.4rem solid #ccc; border-top-color: #0b4f8a; border-radius: 50%;
          animation: spin 1s linear infinite; }
        @keyframes spin { to { transform: rotate(360deg); } }
        @media (prefers-reduced-motion: reduce) { .spinner { animation: none; } .bar > div { transition: none; } }
        """#

    static let script = #"""
        'use strict';
        // The station's page: draws the bridge's views in the person's language and posts the person's actions. Personal
        // data lives only in this page's memory and is dropped whenever the view goes back to the start screen.
        (function () {
          const app = document.getElementById('app');
          const announcer = document.getElementById('announce');
          const root = document.documentElement;
          const defaultLanguage = root.getAttribute('data-default-language') || 'en';
          let language = defaultLanguage;
          let catalogues = {};    // code -> {language, name, dateOrder, messages}
          let languages = [];     // [{code, name}] in button order
          let view = null;
          let capture = null;     // the last camera capture: {mediaType, data}
          let stream = null;      // the camera while a camera screen shows
          let reading = null;     // the MRZ camera loop: {stop()}
          let alternative = 0;    // the chosen alternative of the form on screen
          let mrzRead = null;     // the MRZ lines the camera read on this screen
          let lastTouch = 0;

          // ---- words ----
          function lookup(key) {
            const own = view && view.messages;
            for (const source of [own && own[language], (catalogues[language] || {}).messages, own && own.en,
                                  (catalogues.en || {}).messages]) {
              if (source && typeof source[key] === 'string') return source[key];
            }
            return undefined;
          }
          function fill(text, params) {
            return text.replace(/\{(\w+)\}/g, (m, k) => (params && params[k] !== undefined ? String(params[k]) : m));
          }
          // The text of a catalogue key (the workflow's override first), with its {name}s filled in.
          function t(key, params) {
            const text = lookup(key);
            return text === undefined ? key : fill(text, params);
          }
          // The first of `keys` a catalogue has, else `fallback` (e.g. a custom step's prompt from the workflow's config).
          function tOr(keys, fallback, params) {
            for (const k of keys) { const text = lookup(k); if (text !== undefined) return fill(text, params); }
            return fallback;
          }
          function dateOrder() { return ((catalogues[language] || {}).dateOrder || 'DMY').split(''); }

          function setLanguage(code) {
            if (!catalogues[code]) return;
            language = code;
            root.setAttribute('lang', code);
            document.title = t('app.title');
          }

          function announce(text) {
            announcer.textContent = '';
            setTimeout(() => { announcer.textContent = text; }, 50);
          }

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
            if (!r.ok && !(r.headers.get('content-type') || '').startsWith('application/json')) {
              return {error: {code: 'HTTP_' + r.status}};
            }
            return r.json();
          }
          const act = (body) => post('/api/action', body);

          function touch() {
            const now = Date.now();
            if (now - lastTouch > 3000) { lastTouch = now; act({action: 'touch'}).catch(() => {}); }
          }
          ['pointerdown', 'keydown', 'input'].forEach((ev) => document.addEventListener(ev, touch, true));

          function stopCamera() {
            if (reading) { reading.stop(); reading = null; }
            if (stream) { stream.getTracks().forEach((tr) => tr.stop()); stream = null; }
          }

          function wipe() {
            stopCamera();
            capture = null;
            alternative = 0;
            mrzRead = null;
            setLanguage(defaultLanguage);
          }

          // A screen: the title, a scrolling content region, and the action buttons always in view at the bottom.
          function screen(v, title, content, actions) {
            const h1 = el('h1', {tabindex: '-1', text: title});
            const region = el('div', {class: 'content', role: 'region', tabindex: '0', 'aria-label': title}, ...content);
            return el('section', {class: 'screen', 'data-step': v.screen, 'data-kind': v.kind},
              el('header', {}, h1), region, el('div', {class: 'actions'}, ...actions.filter(Boolean)));
          }

          function cancelButton() {
            return el('button', {type: 'button', 'data-action': 'cancel', text: t('button.cancel'),
                                 onclick: () => act({action: 'cancel'})});
          }
          function drawing(name, altKey, cls) {
            return el('img', {src: '/drawings/' + name + '.svg', alt: t(altKey), class: cls || null, 'data-drawing': name});
          }

          // ---- start ----
          function drawStart(v) {
            const token = el('input', {id: 'activationToken', name: 'activationToken', autocomplete: 'off'});
            const start = el('button', {type: 'submit', form: 'start-form', class: 'primary', 'data-action': 'continue',
                                        text: t('start.button')});
            const form = el('form', {id: 'start-form', onsubmit: async (e) => {
              e.preventDefault();
              start.disabled = true;
              const r = await act({action: 'start', activationToken: token.value});
              if (r.error) { start.disabled = false; showError(form, r.error); }
            }}, el('label', {for: 'activationToken'}, t('start.code'), token),
              el('p', {class: 'error', role: 'alert', 'data-answer-error': true}));
            const langs = languages.length > 1 ? el('div', {class: 'languages', role: 'group', 'aria-label': t('language.label')},
              ...languages.map((l) => el('button', {type: 'button', lang: l.code, 'data-language': l.code, text: l.name,
                'aria-pressed': l.code === language ? 'true' : 'false',
                onclick: () => { setLanguage(l.code); render(view, true); focusLanguage(l.code); }}))) : null;
            return screen(v, t('start.title'), [langs,
              v.notice ? el('p', {class: 'hint', 'data-notice': v.notice, text: t(v.notice)}) : null,
              el('p', {text: t('start.text')}), form], [start]);
          }
          function focusLanguage(code) {
            const b = app.querySelector('[data-language="' + code + '"]');
            if (b) b.focus();
          }

          // ---- working ----
          function drawWorking(v) {
            const title = tOr(['step.' + v.screen + '.title'], t('working.title'));
            return screen(v, title, [el('p', {text: t('working.text')}),
              el('div', {class: 'spinner', role: 'img', 'aria-label': t('working.title')})], [cancelButton()]);
          }

          // ---- place your document ----
          function drawDocument(v) {
            const status = el('p', {class: 'status', 'data-progress': true});
            const fillBar = el('div', {});
            const bar = el('div', {class: 'bar', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100,
                                   'aria-label': t('document.progress')}, fillBar);
            const stages = el('ol', {class: 'stages'});
            const s = screen(v, t('document.title'), [el('p', {text: t('document.text')}),
              drawing('reader', 'document.drawing', 'drawing'), status, bar, stages], [cancelButton()]);
            updateDocument(s, v);
            return s;
          }
          function updateDocument(s, v) {
            const p = v.progress || {};
            const status = s.querySelector('[data-progress]');
            const stageList = p.stages || [];
            const current = stageList.indexOf(p.stage);
            const text = p.waitingForCard ? t('document.waiting') : t('stage.' + p.stage);
            if (status.textContent !== text) { status.textContent = text; announce(text); }
            status.setAttribute('data-progress', p.waitingForCard ? 'waitingForCard' : 'reading');
            status.setAttribute('data-stage', p.waitingForCard ? '' : p.stage);
            const bar = s.querySelector('[role=progressbar]');
            bar.setAttribute('aria-valuenow', String(p.percent || 0));
            bar.setAttribute('aria-valuetext', text);
            bar.firstElementChild.style.width = (p.percent || 0) + '%';
            s.querySelector('.stages').replaceChildren(...stageList.map((st, i) => {
              const done = !p.waitingForCard && i < current;
              return el('li', {'data-stage': st, 'data-done': done ? 'true' : 'false',
                               'aria-current': !p.waitingForCard && i === current ? 'step' : null},
                t('stage.' + st), done ? el('span', {class: 'sr-only', text: ' (' + t('stage.done') + ')'}) : null);
            }));
          }

          // ---- a step's form ----
          const dateFields = ['dateOfBirth', 'dateOfExpiry'];
          const accessFields = ['mrz', 'can', 'documentNumber', 'dateOfBirth', 'dateOfExpiry'];
          const mrzKeys = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<'.split('');

          function label(v, f) { return tOr(['step.' + v.screen + '.field.' + f.name, 'field.' + f.name], f.label); }

          function dateInput(v, f) {
            const parts = {D: ['day', 2, 'bday-day'], M: ['month', 2, 'bday-month'], Y: ['year', 4, 'bday-year']};
            const hint = el('p', {id: f.name + '-hint', class: 'sr-only', text: t('date.hint')});
            return el('fieldset', {'data-date': f.name, 'aria-describedby': f.name + '-hint'},
              el('legend', {text: label(v, f)}), hint,
              el('div', {class: 'date'}, ...dateOrder().map((k) => {
                const [part, size] = parts[k];
                const id = f.name + '-' + part;
                return el('label', {for: id}, t('date.' + part),
                  el('input', {id, name: id, 'data-date-part': part, inputmode: 'numeric', maxlength: size,
                               size: size, autocomplete: 'off', required: !f.optional}));
              })));
          }

          function keypad(area) {
            function press(key) {
              const start = area.selectionStart, end = area.selectionEnd, text = area.value;
              if (key === 'delete') {
                const from = start === end ? Math.max(0, start - 1) : start;
                area.value = text.slice(0, from) + text.slice(end);
                area.selectionStart = area.selectionEnd = from;
              } else {
                const ch = key === 'newline' ? '\n' : key;
                area.value = text.slice(0, start) + ch + text.slice(end);
                area.selectionStart = area.selectionEnd = start + 1;
              }
              area.dispatchEvent(new Event('input', {bubbles: true}));
            }
            return el('div', {class: 'keypad', role: 'group', 'aria-label': t('keypad.label'), 'data-keypad': true},
              ...mrzKeys.map((k) => el('button', {type: 'button', 'data-key': k, text: k,
                'aria-label': k === '<' ? t('keypad.filler') : null, onclick: () => press(k)})),
              el('button', {type: 'button', class: 'wide', 'data-key': 'newline', text: t('keypad.newline'),
                            onclick: () => press('newline')}),
              el('button', {type: 'button', class: 'wide', 'data-key': 'delete', text: t('keypad.delete'),
                            onclick: () => press('delete')}));
          }

          function fieldInput(v, f) {
            if (f.constant !== undefined && f.kind !== 'boolean') return null;
            const id = 'field-' + f.name;
            if (f.kind === 'boolean') {
              return el('label', {class: 'check', for: id},
                el('input', {id, type: 'checkbox', name: f.name, required: !f.optional && f.constant === true}), label(v, f));
            }
            if (dateFields.includes(f.name) && f.kind === 'string') return dateInput(v, f);
            let input;
            const extra = [];
            if (f.choices.length) {
              input = el('select', {id, name: f.name, required: !f.optional},
                ...f.choices.map((c) => el('option', {value: c, text: c})));
            } else if (f.name === 'mrz') {
              input = el('textarea', {id, name: 'mrz', rows: 3, wrap: 'off', spellcheck: 'false', autocomplete: 'off',
                                      autocapitalize: 'characters', required: true, 'aria-describedby': 'checkline'});
              extra.push(keypad(input));
            } else {
              const numeric = ['otp', 'pin', 'can'].includes(f.name.toLowerCase()) || f.kind !== 'string';
              // Nothing a person typed is offered to the next (autocomplete off); a secret field (a password field)
          // takes no "off", which is not valid there, and a kiosk's browser never saves a password.
          input = el('input', {id, name: f.name, type: f.secret ? 'password' : 'text', autocomplete: f.secret ? null : 'off',
                                   inputmode: numeric ? 'numeric' : null, required: !f.optional,
                                   'aria-describedby': accessFields.includes(f.name) ? 'checkline' : null});
            }
            return el('div', {class: 'field'},
              el('label', {for: id}, label(v, f) + (f.optional ? ' ' + t('optional') : ''), input), ...extra);
          }

          // A date's parts as the MRZ's YYMMDD: {state: 'empty' | 'partial' | 'invalid' | 'ok', value}.
          function dateValue(form, name) {
            const get = (p) => ((form.querySelector('[name="' + name + '-' + p + '"]') || {}).value || '').trim();
            const d = get('day'), m = get('month'), y = get('year');
            if (!d && !m && !y) return {state: 'empty', value: ''};
            if (!/^\d{1,2}$/.test(d) || !/^\d{1,2}$/.test(m) || !/^\d{4}$/.test(y)) return {state: 'partial', value: ''};
            const day = Number(d), month = Number(m), year = Number(y);
            const real = new Date(Date.UTC(year, month - 1, day));
            if (month < 1 || month > 12 || day < 1 || real.getUTCDate() !== day || real.getUTCMonth() !== month - 1) {
              return {state: 'invalid', value: ''};
            }
            const two = (n) => String(n % 100).padStart(2, '0');
            return {state: 'ok', value: two(year) + two(month) + two(day)};
          }

          function fieldValue(form, f) {
            if (f.constant !== undefined && f.kind !== 'boolean') return f.constant;
            if (dateFields.includes(f.name) && form.querySelector('[data-date="' + f.name + '"]')) {
              const d = dateValue(form, f.name);
              return d.value === '' && f.optional ? undefined : d.value;
            }
            const input = form.querySelector('[name="' + f.name + '"]');
            if (!input) return undefined;
            if (f.kind === 'boolean') return input.checked;
            let text = input.value.trim();
            if (f.name === 'mrz') text = text.toUpperCase().split(/\s+/).filter(Boolean).join('\n');
            if (text === '' && f.optional) return undefined;
            if (f.kind === 'integer' || f.kind === 'number') return Number(text);
            return text;
          }

          // The tab of an alternative of the document step, named by what it asks for.
          function tabName(v, fields) {
            const names = fields.filter((x) => !x.optional).map((x) => x.name);
            if (names.includes('mrz')) return t('mrz.tab.mrz');
            if (names.includes('can')) return t('mrz.tab.can');
            if (names.includes('documentNumber')) return t('mrz.tab.fields');
            return fields.filter((x) => !x.optional).map((x) => label(v, x)).join(', ') || '—';
          }

          function drawForm(v) {
            const f = v.form;
            const alts = f.alternatives.length ? f.alternatives : [[]];
            if (alternative >= alts.length) alternative = 0;
            const fields = alts[alternative];
            const names = fields.map((x) => x.name);
            const go = el('button', {type: 'submit', form: 'step-form', class: 'primary', 'data-action': 'continue',
                                     text: t('button.continue')});
            const checkline = el('p', {id: 'checkline', class: 'checkline', 'data-check': true});
            const form = el('form', {id: 'step-form', 'data-alternative': alternative, novalidate: true});
            form.append(...fields.map((x) => fieldInput(v, x)).filter(Boolean));
            const checked = fields.some((x) => accessFields.includes(x.name));
            let lastState = '';
            function showCheck(state, text) {
              checkline.textContent = text;
              checkline.className = 'checkline' + (state === 'valid' ? ' ok' : (state === 'invalid' ? ' error' : ''));
              checkline.setAttribute('data-check', state);
              go.disabled = state !== 'valid';
              if (state !== lastState && state !== 'incomplete') announce(text);
              lastState = state;
            }
            let asked = 0;
            async function check() {
              const values = {};
              for (const x of fields) {
                if (dateFields.includes(x.name) && dateValue(form, x.name).state === 'invalid') {
                  ++asked;
                  return showCheck('invalid', t('check.dateInvalid'));
                }
                const val = fieldValue(form, x);
                values[x.name] = val === undefined ? '' : val;
              }
              const mine = ++asked;
              const r = await post('/api/check', values);
              if (mine !== asked) return;  // an answer to older input
              showCheck(r.valid ? 'valid' : (r.complete ? 'invalid' : 'incomplete'), t(r.key || 'check.invalid', r.params));
            }
            if (checked) {
              form.append(checkline);
              go.disabled = true;
              form.addEventListener('input', check);
            }
            const more = [];
            if (f.offersResend) {
              more.push(el('button', {type: 'button', 'data-action': 'resend', text: t('button.resend'),
                onclick: () => act({action: 'submit', step: v.screen, payload: {resend: true}})}));
            }
            form.append(el('p', {class: 'error', role: 'alert', 'data-answer-error': true}));
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
            if (f.to) details.push(t('form.sentTo', {to: f.to}));
            if (f.attemptsLeft !== undefined) details.push(t('form.attemptsLeft', {n: f.attemptsLeft}));
            if (f.retriesLeft !== undefined) details.push(t('form.pinTriesLeft', {n: f.retriesLeft}));
            const tabs = alts.length > 1 ? el('div', {class: 'tabs', role: 'group', 'aria-label': t('mrz.tabs')},
              ...alts.map((a, i) => el('button', {type: 'button', 'data-alternative': i,
                'aria-pressed': i === alternative ? 'true' : 'false', text: tabName(v, a),
                onclick: () => { alternative = i; render(view, true); }}))) : null;
            const help = tOr(['step.' + v.screen + '.help'], null);
            const title = tOr(['step.' + v.screen + '.title'], f.prompt || t('step.title'));
            const intro = [help ? el('p', {text: help}) : null, details.length ? el('p', {text: details.join(' · ')}) : null];
            let content;
            if (names.some((n) => accessFields.includes(n))) {
              // The document step: the camera reads the lines (any tab), the drawing shows where they are.
              const pictures = names.includes('can')
                ? [drawing('card-can', 'mrz.drawing.can')]
                : [drawing('passport-mrz', 'mrz.drawing.passport'), drawing('card-mrz', 'mrz.drawing.card')];
              const mrzIndex = alts.findIndex((a) => a.some((x) => x.name === 'mrz'));
              const side = [el('div', {class: 'drawings'}, ...pictures)];
              if (mrzIndex >= 0 && mrzRead) {
                side.push(el('p', {'data-mrz-status': 'found', text: t('mrz.camera.found')}));
                const area = form.querySelector('textarea[name="mrz"]');
                if (area) { area.value = mrzRead.join('\n'); area.setAttribute('data-mrz-source', 'camera'); }
              } else if (mrzIndex >= 0) {
                side.push(...mrzCamera(v, mrzIndex));
              }
              content = [...intro, tabs, el('div', {class: 'columns'}, el('div', {}, ...side), el('div', {}, form))];
            } else {
              content = [...intro, tabs, form];
            }
            const s = screen(v, title, content, [go, ...more, cancelButton()]);
            updateAnswerError(s, v);
            if (checked) setTimeout(check, 0);
            return s;
          }

          // The MRZ read from the camera: frames to the station (at most ~2.5 a second), until the reader's lines pass the
          // MRZ check (check digits, by the station's MRZ module); then they fill the lines field for the person to confirm.
          function mrzCamera(v, mrzIndex) {
            const video = el('video', {class: 'mrz', autoplay: true, playsinline: true, muted: true, 'data-mrz-camera': true,
                                       'aria-label': t('mrz.camera.label')});
            const status = el('p', {'data-mrz-status': 'starting', text: t('mrz.camera.looking')});
            let stopped = false;
            let timer = null;
            reading = {stop() { stopped = true; clearTimeout(timer); }};
            const found = (lines) => {
              stopCamera();
              mrzRead = lines;
              alternative = mrzIndex;
              render(view, true);
              announce(t('mrz.camera.found'));
            };
            const unavailable = () => {
              stopCamera();
              status.textContent = t('mrz.camera.unavailable');
              status.setAttribute('data-mrz-status', 'unavailable');
              video.hidden = true;
            };
            async function loop() {
              if (stopped) return;
              if (video.readyState >= 2 && video.videoWidth) {
                let r;
                try { r = await post('/api/mrz', {image: grab(video, 0.85)}); } catch (e) { r = {error: {code: 'NETWORK'}}; }
                if (stopped) return;
                if (r.valid && Array.isArray(r.lines)) return found(r.lines);
                // No reader, or not this step's: typing only. A reader that failed once gets another frame later.
                if (r.error && !r.error.retryable) return unavailable();
                status.setAttribute('data-mrz-status', r.error ? 'retrying' : 'looking');
                timer = setTimeout(loop, r.error ? 1500 : 400);
                return;
              }
              timer = setTimeout(loop, 400);
            }
            if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
              setTimeout(unavailable, 0);
            } else {
              navigator.mediaDevices.getUserMedia({video: {width: 1280, height: 720}, audio: false}).then((m) => {
                if (stopped) { m.getTracks().forEach((tr) => tr.stop()); return; }
                stream = m;
                video.srcObject = m;
                loop();
              }).catch(unavailable);
            }
            return [video, status];
          }

          function showError(parent, error) {
            const line = parent.querySelector('[data-answer-error]') ||
              parent.appendChild(el('p', {class: 'error', role: 'alert', 'data-answer-error': true}));
            let text = tOr(['error.' + error.code], t('error.answer'));
            if (error.attemptsLeft !== undefined) text += ' ' + t('form.attemptsLeft', {n: error.attemptsLeft});
            line.textContent = text;
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
            const video = el('video', {autoplay: true, playsinline: true, muted: true, 'data-camera': true,
                                       'aria-label': t('camera.label')});
            const go = el('button', {type: 'button', class: 'primary', 'data-action': 'continue', text: t('button.photo'),
                                     disabled: true});
            const status = el('p', {'data-camera-status': true, text: t('camera.starting')});
            const challenge = Array.isArray(f.challenge) ? el('ol', {class: 'challenge', 'data-challenge': f.challenge.join(' ')},
              ...f.challenge.map((a) => el('li', {text: tOr(['challenge.' + a], a)}))) : null;
            const extra = (f.alternatives[0] || []);
            const form = el('form', {}, ...extra.map((x) => fieldInput(v, x)).filter(Boolean));
            go.addEventListener('click', async () => {
              go.disabled = true;
              status.textContent = t('camera.hold');
              const frames = [];
              const count = Array.isArray(f.challenge) ? Math.min(30, 4 * f.challenge.length) : 1;
              for (let i = 0; i < count; i++) {
                if (i) await new Promise((r) => setTimeout(r, 400));
                frames.push(grab(video, 0.92));
              }
              capture = frames[0];
              const payload = {[f.imageField]: frames};
              for (const x of extra) { const val = fieldValue(form, x); if (val !== undefined) payload[x.name] = val; }
              status.textContent = t('camera.checking');
              announce(t('camera.checking'));
              const r = await act({action: 'submit', step: v.screen, payload});
              if (r.error) { status.textContent = t('camera.again'); go.disabled = false; showError(s, r.error); }
            });
            const title = tOr(['step.' + v.screen + '.title'], f.prompt || t('step.title'));
            const s = screen(v, title, [el('p', {text: t('camera.text')}), challenge,
              el('div', {class: 'preview'}, video, el('img', {src: '/drawings/face-guide.svg', alt: '', 'data-drawing': 'face-guide'})),
              status, form, el('p', {class: 'error', role: 'alert', 'data-answer-error': true})], [go, cancelButton()]);
            navigator.mediaDevices.getUserMedia({video: {width: 640, height: 480}, audio: false}).then((m) => {
              stream = m;
              video.srcObject = m;
              video.onloadeddata = () => { status.textContent = t('camera.ready'); go.disabled = false; };
            }).catch(() => {
              status.textContent = t('camera.unavailable');
              status.setAttribute('data-camera-status', 'unavailable');
            });
            updateAnswerError(s, v);
            return s;
          }
          function grab(video, quality) {
            const c = document.createElement('canvas');
            c.width = video.videoWidth || 640;
            c.height = video.videoHeight || 480;
            c.getContext('2d').drawImage(video, 0, 0, c.width, c.height);
            const url = c.toDataURL('image/jpeg', quality);
            return {mediaType: 'image/jpeg', data: url.slice(url.indexOf(',') + 1)};
          }

          // ---- result ----
          function image(kind, caption, img) {
            if (!img) return null;
            const displayable = ['image/jpeg', 'image/png'].includes(img.mediaType);
            return el('figure', {'data-image': kind},
              displayable ? el('img', {alt: caption, src: 'data:' + img.mediaType + ';base64,' + img.data})
                          : el('p', {text: t('done.imageNotShown')}),
              el('figcaption', {text: caption}));
          }
          function drawDone(v) {
            stopCamera();
            const r = v.result || {};
            const name = [r.givenNames, r.surname].filter(Boolean).join(' ');
            const finish = el('button', {type: 'button', class: 'primary', 'data-action': 'continue', text: t('button.finish'),
                                         onclick: () => act({action: 'restart'})});
            return screen(v, t('done.title'), [
              name ? el('p', {'data-result': 'name', text: name}) : null,
              r.rpId ? el('p', {'data-result': 'rpId', text: t('done.rp', {rp: r.rpId})}) : null,
              el('div', {class: 'faces'}, image('portrait', t('done.portrait'), v.portrait),
                image('capture', t('done.capture'), capture))], [finish]);
          }

          // ---- error ----
          function drawError(v) {
            stopCamera();
            const e = v.error || {};
            const buttons = [];
            if (e.retryable) {
              buttons.push(el('button', {type: 'button', class: 'primary', 'data-action': 'retry', text: t('button.retry'),
                                         onclick: () => act({action: 'retry'})}));
              buttons.push(el('button', {type: 'button', 'data-action': 'cancel', text: t('button.cancel'),
                                         onclick: async () => { await act({action: 'cancel'}); act({action: 'restart'}); }}));
            } else {
              buttons.push(el('button', {type: 'button', class: 'primary', 'data-action': 'continue', text: t('button.startOver'),
                                         onclick: () => act({action: 'restart'})}));
            }
            const text = tOr(['error.' + e.code], t('error.default'));
            return screen(v, t(e.retryable ? 'error.title.retry' : 'error.title.final'),
              [el('p', {class: 'hint', role: 'alert', 'data-error-code': e.code, text})], buttons);
          }

          const draw = {start: drawStart, working: drawWorking, document: drawDocument, form: drawForm,
                        camera: drawCamera, done: drawDone, error: drawError};

          function render(v, force) {
            const old = view;
            if (old && v.version === old.version && !force) return;
            view = v;
            const current = app.firstElementChild;
            // The workflow's own words may arrive after its first screen (with the start's answer): drawn again then.
            const same = old && current && current.getAttribute('data-kind') && old.screen === v.screen &&
              old.kind === v.kind && !force && JSON.stringify(old.messages) === JSON.stringify(v.messages);
            if (same && v.kind === 'document') return updateDocument(current, v);
            if (same && (v.kind === 'form' || v.kind === 'camera')) return updateAnswerError(current, v);
            if (same && v.kind === 'working') return;
            if (v.screen === 'start' && v.kind === 'start' && old && old.screen !== 'start') wipe();
            stopCamera();
            if (!same && !force) { alternative = 0; mrzRead = null; }
            const s = (draw[v.kind] || drawWorking)(v);
            app.replaceChildren(s);
            if (!force) {
              const h1 = s.querySelector('h1');
              const first = s.querySelector('form input:not([type=hidden]), form textarea, form select');
              (first || h1).focus({preventScroll: true});
              announce(h1.textContent);
            }
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

          fetch('/catalogues.json').then((r) => r.json()).then((c) => {
            catalogues = c.catalogues || {};
            languages = c.languages || [];
            setLanguage(catalogues[defaultLanguage] ? defaultLanguage : 'en');
          }).catch(() => {}).finally(connect);
        })();
        """#
}
