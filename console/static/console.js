// jingwei review console: live updates without a reload. The console
// sends "change" on /live (Server-Sent Events) when the recovery worker's
// state, the session logs or the reviews change; this script then fetches
// the page again and replaces its live parts (the elements with
// data-live), leaving forms and what the reviewer typed alone.
(function () {
  "use strict";
  var state = document.getElementById("live-state");
  function show(text, cls) {
    if (!state) return;
    state.textContent = text;
    state.className = "live-state " + cls;
  }
  // typing reports whether the reviewer has started to fill a form in el:
  // such a part is not replaced under their hands.
  function typing(el) {
    var inputs = el.querySelectorAll("input, textarea, select");
    for (var i = 0; i < inputs.length; i++) {
      var x = inputs[i];
      if (x.type === "hidden") continue;
      if ((x.type === "radio" || x.type === "checkbox") ? x.checked : x.value !== "") return true;
    }
    return el.contains(document.activeElement) && document.activeElement !== el;
  }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          if (el.hasAttribute("data-keep-input") && typing(el)) return;
          var fresh = el.id && doc.getElementById(el.id);
          // Unchanged parts stay as they are (the nodes, the focus).
          if (fresh && fresh.innerHTML !== el.innerHTML) el.replaceWith(document.importNode(fresh, true));
        });
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { show("update failed", "down"); })
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  if (!window.EventSource) { show("no live updates", "down"); return; }
  var es = new EventSource("/live");
  es.addEventListener("hello", function () { show("live", "up"); refresh(); });
  es.addEventListener("change", function () { show("live", "up"); refresh(); });
  es.onerror = function () { show("reconnecting…", "down"); };
})();
