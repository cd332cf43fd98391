// The gallery's behaviour: sort, filter and page the entries; draw the attention view.
// Data comes from data.js (window.GALLERY); text is only ever set with textContent.
"use strict";
(function () {
  const G = window.GALLERY;
  const DIM = 0.8; // opacity of the black shade at weight 0 (as captioning/visualize.py)
  const CONTOUR = "#00e5ff"; // cells at >= half the scale's maximum are outlined in this hue
  const SIDE = 112; // canvas pixels a side
  const $ = (id) => document.getElementById(id);
  const entries = Array.from(document.querySelectorAll("article.entry"));
  let page = 0;

  function num(el, name) {
    const v = parseFloat(el.getAttribute("data-" + name));
    return isNaN(v) ? 0 : v;
  }

  function order() {
    const a = $("run-a").value, b = $("run-b").value, metric = $("metric").value;
    const how = $("sort").value, sign = $("direction").value === "desc" ? -1 : 1;
    const key = {
      diff: (e) => num(e, metric + "-" + a) - num(e, metric + "-" + b),
      errors: (e) => num(e, "err-" + a) + num(e, "err-" + b),
      length: (e) => num(e, "len-" + a),
      order: (e) => -sign * num(e, "k"),
    }[how];
    let shown = entries.slice();
    if ($("only-errors").checked) {
      shown = shown.filter((e) => num(e, "err-" + a) + num(e, "err-" + b) > 0);
    }
    // stable: ties keep image order
    shown.sort((x, y) => sign * (key(x) - key(y)) || num(x, "k") - num(y, "k"));
    return shown;
  }

  function render() {
    const shown = order(), size = G.page_size;
    const pages = Math.max(1, Math.ceil(shown.length / size));
    page = Math.min(page, pages - 1);
    const main = $("entries");
    const visible = new Set(shown.slice(page * size, (page + 1) * size));
    for (const e of entries) e.hidden = !visible.has(e);
    for (const e of shown) main.appendChild(e); // the DOM in the sorted order
    $("page").textContent = "page " + (page + 1) + " of " + pages + " (" + shown.length + " images)";
    $("prev").disabled = page === 0;
    $("next").disabled = page >= pages - 1;
  }

  function drawMap(canvas, img, weights, top) {
    const ctx = canvas.getContext("2d");
    const side = Math.round(Math.sqrt(weights.length)), cell = SIDE / side;
    ctx.drawImage(img, 0, 0, SIDE, SIDE);
    const half = top / 2, hot = weights.map((w) => w >= half && top > 0);
    weights.forEach((w, i) => {
      const x = (i % side) * cell, y = Math.floor(i / side) * cell;
      ctx.fillStyle = "rgba(0,0,0," + (DIM * (1 - Math.min(w / top, 1))).toFixed(4) + ")";
      ctx.fillRect(x, y, cell, cell);
    });
    ctx.strokeStyle = CONTOUR;
    ctx.lineWidth = 2;
    ctx.beginPath();
    hot.forEach((h, i) => { // the outline of the hot cells: edges next to a cold cell or the border
      if (!h) return;
      const r = Math.floor(i / side), c = i % side, x = c * cell, y = r * cell;
      if (r === 0 || !hot[i - side]) { ctx.moveTo(x, y); ctx.lineTo(x + cell, y); }
      if (r === side - 1 || !hot[i + side]) { ctx.moveTo(x, y + cell); ctx.lineTo(x + cell, y + cell); }
      if (c === 0 || !hot[i - 1]) { ctx.moveTo(x, y); ctx.lineTo(x, y + cell); }
      if (c === side - 1 || !hot[i + 1]) { ctx.moveTo(x + cell, y); ctx.lineTo(x + cell, y + cell); }
    });
    ctx.stroke();
  }

  function colourBar(top, cells) {
    const wrap = document.createElement("div");
    wrap.className = "bar";
    const canvas = document.createElement("canvas");
    canvas.width = 240; canvas.height = 14;
    const ctx = canvas.getContext("2d"), grad = ctx.createLinearGradient(0, 0, 240, 0);
    grad.addColorStop(0, "rgb(51,51,51)"); // brightness at weight 0: 1 - DIM
    grad.addColorStop(1, "rgb(255,255,255)");
    ctx.fillStyle = grad; ctx.fillRect(0, 0, 240, 14);
    if (cells && 1 / cells <= top) { // where a uniform map sits
      const x = 240 * (1 / cells) / top;
      ctx.fillStyle = CONTOUR; ctx.fillRect(x - 1, 0, 3, 14);
    }
    const label = document.createElement("span");
    label.textContent = "attention weight 0 .. " + top.toFixed(3) + " (one scale for every map of this image;" +
      " the blue mark: uniform 1/" + cells + ")";
    wrap.append(canvas, label);
    return wrap;
  }

  function openAttention(entry) {
    const panel = entry.querySelector(".attention");
    if (!panel.hidden) { panel.hidden = true; return; }
    panel.hidden = false;
    if (panel.dataset.drawn) return;
    panel.dataset.drawn = "1";
    const runs = G.attention[entry.dataset.k], img = entry.querySelector("img.photo");
    let top = 0, longest = 0;
    for (const r of runs) {
      if (!r.weights) continue;
      longest = Math.max(longest, r.weights.length);
      for (const row of r.weights) for (const w of row) top = Math.max(top, w);
    }
    if (!longest) { panel.textContent = "no attention: the runs have no checkpoint"; return; }
    panel.appendChild(colourBar(top, G.cells));
    const table = document.createElement("table");
    const head = table.insertRow();
    head.insertCell().textContent = "word";
    G.runs.forEach((name, j) => {
      const th = document.createElement("th");
      th.textContent = name + (runs[j].differs ? " (re-decoded here: another caption)" : "");
      head.appendChild(th);
    });
    const draw = () => {
      for (let t = 0; t < longest; t++) {
        const tr = table.insertRow();
        tr.insertCell().textContent = String(t + 1);
        runs.forEach((r) => {
          const td = tr.insertCell();
          if (!r.weights || t >= r.weights.length) return;
          const canvas = document.createElement("canvas");
          canvas.width = SIDE; canvas.height = SIDE;
          drawMap(canvas, img, r.weights[t], top);
          const word = document.createElement("div");
          word.className = "word";
          word.textContent = t < r.words.length ? r.words[t] : "<end>";
          const off = 1 - r.weights[t].reduce((s, w) => s + w, 0);
          if (off > 1e-3) word.textContent += "  (sentinel " + off.toFixed(2) + ")";
          td.append(canvas, word);
        });
      }
    };
    if (img.complete && img.naturalWidth) draw(); else img.addEventListener("load", draw, { once: true });
    img.loading = "eager";
    panel.appendChild(table);
  }

  // The view lives in the address's #fragment (sort=diff&metric=cider&a=0&b=1&dir=desc&errors=1
  // &page=2&open=<k>|first): a link or a bookmark reopens the same view.
  const FIELDS = [["sort", "sort"], ["metric", "metric"], ["run-a", "a"], ["run-b", "b"], ["direction", "dir"]];

  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    for (const [id, key] of FIELDS) {
      const el = $(id);
      if (p.has(key) && Array.from(el.options).some((o) => o.value === p.get(key))) el.value = p.get(key);
    }
    $("only-errors").checked = p.get("errors") === "1";
    page = Math.max(0, (parseInt(p.get("page"), 10) || 1) - 1);
    return p.get("open");
  }

  function writeHash() {
    const p = new URLSearchParams();
    for (const [id, key] of FIELDS) p.set(key, $(id).value);
    if ($("only-errors").checked) p.set("errors", "1");
    p.set("page", String(page + 1));
    try { history.replaceState(null, "", "#" + p.toString()); } catch (err) { /* a sandboxed page */ }
  }

  function update() { render(); writeHash(); }

  for (const id of ["sort", "metric", "run-a", "run-b", "direction", "only-errors"]) {
    $(id).addEventListener("change", () => { page = 0; update(); });
  }
  $("prev").addEventListener("click", () => { page -= 1; update(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { page += 1; update(); window.scrollTo(0, 0); });
  for (const e of entries) {
    e.querySelector("button.show-attention").addEventListener("click", () => openAttention(e));
  }
  const open = readHash();
  render();
  if (open) {
    const entry = open === "first" ? order()[page * G.page_size] : $("e" + open);
    if (entry) {
      openAttention(entry);
      if (entry.getBoundingClientRect().top > window.innerHeight / 2) entry.scrollIntoView();
    }
  }
})();
