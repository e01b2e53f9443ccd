// Sorting and filtering of the site table, and the site details the address names
// (#site-3 opens the third site's). The address may also carry a sort and a filter
// (#sort=calls&order=desc&q=halo) so that a link, or a test, shows a given view;
// #only=site-3 shows that site's details alone, #only=imbalance,sites those sections (a link
// to one part of the page, or its screenshot).
(function () {
  "use strict";
  const table = document.getElementById("site-table");
  const filter = document.getElementById("filter");
  const shown = document.getElementById("shown");
  const rows = table ? Array.from(table.tBodies[0].rows) : [];
  const headers = table ? Array.from(table.tHead.rows[0].cells) : [];

  function key(row, column, numeric) {
    const cell = row.cells[column];
    return numeric ? parseFloat(cell.dataset.v) : cell.textContent.toLowerCase();
  }

  function sort(column, descending) {
    const numeric = headers[column].dataset.type === "num";
    const sign = descending ? -1 : 1;
    const sorted = rows.slice().sort(function (a, b) {
      const x = key(a, column, numeric), y = key(b, column, numeric);
      return (x < y ? -1 : x > y ? 1 : 0) * sign;
    });
    const body = table.tBodies[0];
    sorted.forEach(function (r) { body.appendChild(r); });
    headers.forEach(function (h, i) {
      h.classList.toggle("asc", i === column && !descending);
      h.classList.toggle("desc", i === column && descending);
    });
  }

  function apply(text) {
    const words = text.toLowerCase().split(/\s+/).filter(Boolean);
    let n = 0;
    rows.forEach(function (r) {
      const all = r.textContent.toLowerCase();
      const match = words.every(function (w) { return all.indexOf(w) >= 0; });
      r.hidden = !match;
      if (match) n++;
    });
    shown.textContent = n + " of " + rows.length + " sites";
  }

  function open(hash) {
    const params = new URLSearchParams(hash.replace(/^#/, ""));
    if (params.has("sort")) {
      const name = params.get("sort");
      const column = headers.findIndex(function (h) { return h.textContent.trim() === name; });
      if (column >= 0) sort(column, params.get("order") === "desc");
    }
    if (params.has("q") && filter) {
      filter.value = params.get("q");
      apply(filter.value);
    }
    const only = (params.get("only") || "").split(",").map(function (id) {
      return document.getElementById(id);
    }).filter(Boolean);
    only.forEach(function (e) { if (e.tagName === "DETAILS") e.open = true; });
    if (only.length) {
      document.querySelectorAll("body > header, body > section, details.site").forEach(
        function (e) {
          e.hidden = !only.some(function (t) { return e.contains(t) || t.contains(e); });
        });
    }
    const target = !only.length && hash.startsWith("#site-") && document.getElementById(hash.slice(1));
    if (target && target.tagName === "DETAILS") {
      target.open = true;
      target.scrollIntoView();
    }
  }

  headers.forEach(function (h, i) {
    h.addEventListener("click", function () {
      sort(i, h.classList.contains("asc"));
    });
  });
  if (filter) {
    filter.addEventListener("input", function () { apply(filter.value); });
    apply("");
  }
  window.addEventListener("hashchange", function () { open(location.hash); });
  open(location.hash);
  document.body.dataset.ready = performance.now().toFixed(1);
})();
