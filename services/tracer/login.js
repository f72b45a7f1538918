// The debugger's sign-in pages (ui_session.go; docs/debugger.md, one-time
// links). A session's cookie alone authenticates nothing: the page must
// also send the session's key, which the server hands over only in its
// answer to the sign-in's same-origin POST (#signed-in). This script keeps
// that key in the origin's localStorage, where the debugger's page
// (ui/debugger/src/api.ts) reads it, then goes on to the chain. On the
// sign-in page (#sign-in) it says who this browser is signed in as now and
// adds that session's handle and key to the form, so Continue ends it.
// Served as a file: the Content-Security-Policy allows no inline script.
'use strict';
(function () {
  var storeKey = 'xct-debugger-session';

  function stored() {
    try {
      var s = JSON.parse(localStorage.getItem(storeKey) || 'null');
      if (s && typeof s.key === 'string' && typeof s.handle === 'string' && typeof s.expires === 'number' && s.expires > Date.now()) return s;
    } catch (e) {
      // no storage, or not ours: no current session
    }
    return null;
  }

  var done = document.getElementById('signed-in');
  if (done) {
    var d = done.dataset;
    try {
      localStorage.setItem(
        storeKey,
        JSON.stringify({ base: d.base, handle: d.handle, key: d.key, who: d.who, expires: Date.now() + Number(d.ttl) * 1000 }),
      );
    } catch (e) {
      document.getElementById('no-storage').hidden = false;
      return;
    }
    location.replace(d.to);
    return;
  }

  var form = document.getElementById('sign-in');
  var s = stored();
  if (!form || !s) return;
  var current = document.getElementById('current');
  current.querySelector('strong').textContent = s.who || 'another principal';
  current.hidden = false;
  var fields = { end: s.handle, end_key: s.key };
  Object.keys(fields).forEach(function (name) {
    var input = document.createElement('input');
    input.type = 'hidden';
    input.name = name;
    input.value = fields[name];
    form.appendChild(input);
  });
})();
