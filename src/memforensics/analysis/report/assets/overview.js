// memforensics overview page: draws the ranks x steps heatmap from the embedded JSON.
// No network and no library: a canvas for the map, SVG for one rank's curve.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("overview-data").textContent);
  var ranks = data.ranks, cols = data.columns, rows = ranks.length;
  var names = Object.keys(data.layers);
  var cells = {};
  names.forEach(function (name) {
    var raw = atob(data.layers[name].cells), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    cells[name] = out;
  });
  var current = names[0];
  var cellW = Math.max(1, Math.min(12, Math.floor(1100 / cols)));
  var cellH = rows <= 48 ? 14 : rows <= 256 ? 3 : 1;
  var pad = 4;  // room above and below the rows, so marks on the first and last rank show
  var gutter = rows <= 48 ? 44 : 16;

  function fmtBytes(v) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    var sign = v < 0 ? "-" : "", a = Math.abs(v);
    for (var i = 0; i < units.length; i++) {
      if (a >= units[i][1]) return sign + (a / units[i][1]).toFixed(2) + " " + units[i][0];
    }
    return sign + Math.round(a) + " B";
  }
  function fmt(layer, v) {
    return data.layers[layer].unit === "bytes" ? fmtBytes(v) : String(Math.round(v));
  }
  function value(layer, q) {
    var l = data.layers[layer];
    return l.min + (q - 1) / 254 * (l.max - l.min);
  }
  function color(q) {  // 0: no line; then light yellow to dark red
    if (q === 0) return [236, 238, 241];
    var t = (q - 1) / 254;
    return [Math.round(255 - 70 * t), Math.round(240 - 220 * t), Math.round(200 - 170 * t)];
  }
  function stepsOf(c) {
    var a = data.first_step + c * data.column_steps;
    return data.column_steps > 1 ? a + "-" + (a + data.column_steps - 1) : String(a);
  }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      // styles through the CSSOM: the page's CSP allows no inline style attribute
      if (k === "style") { node.style.cssText = attrs[k]; } else { node.setAttribute(k, attrs[k]); }
    });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // -- controls: one radio button per layer, and the colour legend ---------------------------
  var controls = document.getElementById("controls");
  names.forEach(function (name) {
    var label = el("label"), input = el("input", {type: "radio", name: "layer", value: name});
    input.checked = name === current;
    input.addEventListener("change", function () { current = name; draw(); });
    label.appendChild(input);
    label.appendChild(document.createTextNode(" " + name));
    controls.appendChild(label);
  });
  var finder = el("label", {}, "open rank ");
  var box = el("input", {type: "number", min: "0", style: "width:6em"});
  box.addEventListener("change", function () {
    var row = ranks.indexOf(Number(box.value));
    if (row >= 0) openRank(row, true);
  });
  finder.appendChild(box);
  controls.appendChild(finder);
  function jump(label, list) {  // buttons that open the ranks the facts above name
    if (!list.length) return;
    controls.appendChild(el("span", {"class": "muted"}, label));
    list.slice(0, 8).forEach(function (rank) {
      var button = el("button", {type: "button"}, "rank " + rank);
      button.addEventListener("click", function () { openRank(ranks.indexOf(rank), true); });
      controls.appendChild(button);
    });
  }
  var legend = el("span", {"class": "legend"});
  var scale = el("canvas", {width: 120, height: 10});
  var legendText = el("span");
  var legendLow = el("span");
  legend.appendChild(legendLow);
  legend.appendChild(scale);
  legend.appendChild(legendText);
  controls.appendChild(legend);
  controls.appendChild(el("span", {"class": "muted"},
    rows + " ranks x " + cols + " columns of " + data.column_steps +
    " step(s); red box: OOM; left mark: red first OOM, orange outlier, green healthy peer"));

  // -- the map --------------------------------------------------------------------------------
  var map = document.getElementById("map");
  var canvas = el("canvas", {width: gutter + cols * cellW, height: rows * cellH + 2 * pad});
  map.appendChild(canvas);
  var tip = el("div", {id: "tip"});
  document.body.appendChild(tip);
  var ctx = canvas.getContext("2d");
  var off = document.createElement("canvas");
  off.width = cols; off.height = rows;

  function draw() {
    var octx = off.getContext("2d"), image = octx.createImageData(cols, rows);
    var q = cells[current];
    for (var i = 0; i < q.length; i++) {
      var c = color(q[i]);
      image.data[4 * i] = c[0]; image.data[4 * i + 1] = c[1];
      image.data[4 * i + 2] = c[2]; image.data[4 * i + 3] = 255;
    }
    octx.putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(off, gutter, pad, cols * cellW, rows * cellH);
    ranks.forEach(function (rank, row) {
      var mark = rank === data.first_oom ? "#c93c3c" : data.outliers.indexOf(rank) >= 0 ?
        "#e08a2c" : rank === data.peer ? "#3d8b4a" : null;
      if (mark) {  // at least 5 px tall, so one rank among thousands is still seen
        var h = Math.max(cellH, 5);
        ctx.fillStyle = mark; ctx.fillRect(0, pad + row * cellH + cellH / 2 - h / 2, 10, h);
      }
      if (cellH >= 14) {
        ctx.fillStyle = "#4b5565"; ctx.font = "11px system-ui";
        ctx.fillText(String(rank), 12, pad + row * cellH + 11);
      }
    });
    ctx.strokeStyle = "#c93c3c"; ctx.lineWidth = 2;
    data.ooms.forEach(function (m) {  // a box round the cell, never smaller than 8 px
      var w = Math.max(cellW, 6), h = Math.max(cellH, 6);
      ctx.strokeRect(gutter + m[1] * cellW + cellW / 2 - w / 2 - 1,
        pad + m[0] * cellH + cellH / 2 - h / 2 - 1, w + 2, h + 2);
    });
    var lctx = scale.getContext("2d");
    for (var x = 0; x < 120; x++) {
      var rgb = color(1 + Math.round(x / 119 * 254));
      lctx.fillStyle = "rgb(" + rgb.join(",") + ")"; lctx.fillRect(x, 0, 1, 10);
    }
    legendLow.textContent = fmt(current, data.layers[current].min);
    legendText.textContent = fmt(current, data.layers[current].max);
  }

  function cellAt(event) {
    var box = canvas.getBoundingClientRect();
    var x = event.clientX - box.left - gutter, y = event.clientY - box.top;
    var row = Math.floor((y - pad) / cellH), col = Math.floor(x / cellW);
    if (row < 0 || row >= rows) return null;
    return {row: row, col: Math.max(0, Math.min(cols - 1, col))};
  }
  canvas.addEventListener("mousemove", function (event) {
    var at = cellAt(event);
    if (!at) { tip.style.display = "none"; return; }
    var q = cells[current][at.row * cols + at.col];
    tip.textContent = "rank " + ranks[at.row] + ", steps " + stepsOf(at.col) + ": " +
      (q ? current + " " + fmt(current, value(current, q)) : "no journal line");
    tip.style.left = (event.clientX + 12) + "px"; tip.style.top = (event.clientY + 12) + "px";
    tip.style.display = "block";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  canvas.addEventListener("click", function (event) {
    var at = cellAt(event);
    if (at) openRank(at.row, true);
  });

  // -- one rank: its facts, its curve, its dumps ----------------------------------------------
  function curve(row) {
    var w = 760, h = 220, pad = 56, series = [["reserved", "#3b6fb6"], ["allocated", "#e08a2c"]];
    var top = 1;
    series.forEach(function (s) { top = Math.max(top, data.layers[s[0]].max); });
    var svg = '<svg width="' + w + '" height="' + h + '">';
    for (var g = 0; g <= 4; g++) {
      var y = h - 20 - g * (h - 30) / 4;
      svg += '<line class="grid" x1="' + pad + '" x2="' + w + '" y1="' + y + '" y2="' + y + '"/>';
      svg += '<text class="tick" x="2" y="' + (y + 4) + '">' + fmtBytes(top * g / 4) + "</text>";
    }
    series.forEach(function (s) {
      var points = [], q = cells[s[0]];
      for (var c = 0; c < cols; c++) {
        var v = q[row * cols + c];
        if (!v) continue;
        var x = pad + (cols > 1 ? c / (cols - 1) : 0) * (w - pad - 4);
        points.push(x.toFixed(1) + "," + (h - 20 - value(s[0], v) / top * (h - 30)).toFixed(1));
      }
      svg += '<polyline fill="none" stroke="' + s[1] + '" stroke-width="1.5" points="' +
        points.join(" ") + '"/>';
    });
    svg += '<text class="tick" x="' + pad + '" y="' + (h - 4) + '">step ' + stepsOf(0) +
      '</text><text class="tick" text-anchor="end" x="' + w + '" y="' + (h - 4) + '">step ' +
      stepsOf(cols - 1) + "</text></svg>";
    return svg;
  }

  function openRank(row, scroll) {
    var rank = ranks[row], facts = data.facts[String(rank)], panel = document.getElementById("rank");
    panel.textContent = "";
    panel.appendChild(el("h2", {}, "rank " + rank));
    if (!facts) {
      panel.appendChild(el("p", {"class": "muted"}, "This rank left no journal line and no dump."));
      return;
    }
    var table = el("table"), pairs = [
      ["peak reserved", fmtBytes(facts.peak_reserved_bytes || 0)],
      ["last reserved", fmtBytes(facts.last_reserved_bytes || 0)],
      ["last allocated", fmtBytes(facts.last_allocated_bytes || 0)],
      ["allocator retries", String(facts.alloc_retries === null ? "-" : facts.alloc_retries)],
      ["external bytes", facts.external_bytes === null ? "-" : fmtBytes(facts.external_bytes)],
      ["reserved growth / 1k steps", facts.reserved_growth_per_1k_steps === null ? "-" :
        fmtBytes(facts.reserved_growth_per_1k_steps)],
      ["OOM", facts.oom ? "step " + facts.oom.step : "none"],
      ["forecast", facts.forecast ? "limit near step " + facts.forecast.step.toLocaleString("en") + ", " +
        fmtBytes(Math.round(facts.forecast.growth_per_step)) + " a step (confidence " +
        facts.forecast.confidence.toFixed(2) + ")" : "none"],
      ["processes (pids)", facts.pids.join(", ") || "-"],
      ["journal lines", String(facts.lines)]];
    pairs.forEach(function (p) {
      var tr = el("tr");
      tr.appendChild(el("th", {}, p[0])); tr.appendChild(el("td", {"class": "n"}, p[1]));
      table.appendChild(tr);
    });
    panel.appendChild(table);
    var keys = el("p", {"class": "muted"});
    keys.appendChild(el("span", {"class": "key", style: "background:#3b6fb6"}));
    keys.appendChild(document.createTextNode("reserved"));
    keys.appendChild(el("span", {"class": "key", style: "background:#e08a2c"}));
    keys.appendChild(document.createTextNode("allocated (largest per column)"));
    panel.appendChild(keys);
    var holder = el("div");
    holder.innerHTML = curve(row);
    panel.appendChild(holder);
    panel.appendChild(el("h2", {}, "dumps"));
    if (!facts.dumps.length) panel.appendChild(el("p", {"class": "muted"}, "none"));
    var list = el("ul", {"class": "dumps"});
    facts.dumps.forEach(function (href) {
      var li = el("li"); li.appendChild(el("a", {href: href}, href)); list.appendChild(li);
    });
    panel.appendChild(list);
    if (scroll) panel.scrollIntoView({behavior: "smooth", block: "start"});
  }

  var jumps = el("div", {id: "jumps"});
  controls.parentNode.insertBefore(jumps, controls.nextSibling);
  var host = controls;
  controls = jumps;
  jump("first OOM:", data.first_oom === null ? [] : [data.first_oom]);
  jump("stand out:", data.outliers);
  jump("healthy peer:", data.peer === null ? [] : [data.peer]);
  controls = host;
  draw();
  var start = ranks.indexOf(data.first_oom);
  if (start >= 0) openRank(start, false);
})();
