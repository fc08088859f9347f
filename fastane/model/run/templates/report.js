// fastane report: sort and filter the layer table, keep the filter in the address's #fragment,
// link the graph to the table.  No library, no network.
(function () {
  "use strict";
  var table = document.getElementById("layer-table");
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var controls = Array.prototype.slice.call(document.querySelectorAll("#filters [data-key]"));
  var shown = document.getElementById("shown");

  function state() {
    var s = {};
    controls.forEach(function (c) { if (c.value) { s[c.dataset.key] = c.value; } });
    return s;
  }

  function apply() {
    var s = state(), n = 0, q = (s.q || "").toLowerCase();
    rows.forEach(function (r) {
      var ok = ["device", "placement", "op", "bound"].every(function (k) {
        return !s[k] || r.dataset[k] === s[k];
      });
      if (ok && q) { ok = r.textContent.toLowerCase().indexOf(q) >= 0; }
      r.hidden = !ok;
      if (ok) { n += 1; }
    });
    shown.textContent = n + " of " + rows.length + " layers";
    var frag = Object.keys(s).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(s[k]);
    }).join("&");
    if (("#" + frag) !== location.hash && !(frag === "" && location.hash === "")) {
      history.replaceState(null, "", frag ? "#" + frag : location.pathname + location.search);
    }
  }

  function fromHash() {
    var s = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { s[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); }
    });
    controls.forEach(function (c) {
      var v = s[c.dataset.key] || "";
      if (c.tagName === "SELECT" && v && !Array.prototype.some.call(c.options, function (o) { return o.value === v; })) {
        v = "";
      }
      c.value = v;
    });
  }

  controls.forEach(function (c) { c.addEventListener(c.tagName === "INPUT" ? "input" : "change", apply); });
  window.addEventListener("hashchange", function () { fromHash(); apply(); });

  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.addEventListener("click", function () {
      var asc = !th.classList.contains("asc");
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(asc ? "asc" : "desc");
      var num = th.dataset.type === "n";
      var key = function (r) {
        var c = r.cells[col];
        return num ? parseFloat(c.dataset.v) : c.textContent.toLowerCase();
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), d = x < y ? -1 : x > y ? 1 : 0;
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  var byName = {};
  rows.forEach(function (r) { byName[r.dataset.name] = r; });
  Array.prototype.forEach.call(document.querySelectorAll("#graph-svg .node[data-name]"), function (g) {
    g.addEventListener("click", function () {
      var r = byName[g.dataset.name];
      if (!r) { return; }
      controls.forEach(function (c) { c.value = ""; });
      apply();
      rows.forEach(function (x) { x.classList.remove("hit"); });
      r.classList.add("hit");
      r.scrollIntoView({block: "center"});
    });
  });
  rows.forEach(function (r) {
    r.addEventListener("click", function () {
      var g = document.querySelector('#graph-svg .node[data-name="' + CSS.escape(r.dataset.name) + '"]');
      Array.prototype.forEach.call(document.querySelectorAll("#graph-svg .node.hit"), function (x) { x.classList.remove("hit"); });
      if (g) { g.classList.add("hit"); }
    });
  });

  fromHash();
  apply();
})();
