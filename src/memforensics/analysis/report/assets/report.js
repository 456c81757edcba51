/* memforensics report: draws the JSON document embedded in the page. No network, no library.
 * Every string from a dump is set with textContent, never as markup. */
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("mf-data").textContent);
  /* The SVG namespace, from an <svg> the HTML parser made: the page holds no URL at all. */
  var SVGNS = document.getElementById("mf-svg-namespace").namespaceURI;
  var KIND_COLORS = {
    parameter: "#3b6fb6", optimizer_state: "#7a4fb0", gradient: "#d9822b",
    activation: "#2f9e6e", input: "#8fcf5f", kv_cache: "#c93c3c", workspace: "#17a2b8",
    temporary: "#c9b037", before_recording: "#8a94a6", buffer: "#6fa8dc",
    unknown: "#c7ccd6", "pending free": "#e7c65b"
  };
  var SITE_COLORS = ["#3b6fb6", "#d9822b", "#2f9e6e", "#c93c3c", "#7a4fb0", "#8c564b",
    "#d16ba5", "#17a2b8", "#b8b8b8"];
  var FREE_COLOR = "#eceff3";

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function sv(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function setAttrs(node, attrs) {
    if (!attrs) { return; }
    Object.keys(attrs).forEach(function (key) {
      // styles through the CSSOM: the page's CSP allows no inline style attribute
      if (key === "style") { node.style.cssText = String(attrs[key]); }
      else { node.setAttribute(key, String(attrs[key])); }
    });
  }

  function fmtBytes(count) {
    if (count === null || count === undefined) { return "-"; }
    var sign = count < 0 ? "-" : "";
    var size = Math.abs(count);
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (size >= units[i][1]) { return sign + (size / units[i][1]).toFixed(2) + " " + units[i][0]; }
    }
    return sign + size + " B";
  }

  function plural(count, word) { return count.toLocaleString() + " " + word + (count === 1 ? "" : "s"); }

  /* ---------- generic sections ---------- */

  function renderVerdict(section, parent) {
    var data = section.data;
    var known = ["fragmentation", "exhausted", "no-oom"].indexOf(data.name) >= 0;
    var box = el("div", { "class": "verdict " + (known ? data.name : "other") });
    if (data.cause) {
      box.appendChild(el("b", null, "Cause: "));
      box.appendChild(document.createTextNode(data.cause));
      (data.causes || []).forEach(function (line) {
        box.appendChild(el("br"));
        box.appendChild(el("b", null, "Also: "));
        box.appendChild(document.createTextNode(line));
      });
      (data.missing || []).forEach(function (line) {
        box.appendChild(el("br"));
        box.appendChild(el("b", null, "Missing: "));
        box.appendChild(document.createTextNode(line));
      });
      box.appendChild(el("br"));
      box.appendChild(el("b", null, "Allocator: "));
    }
    box.appendChild(el("b", null, data.name));
    box.appendChild(document.createTextNode(" — " + data.explanation));
    if (data.moment) {
      box.appendChild(el("br"));
      box.appendChild(el("b", null, "Moment: "));
      box.appendChild(document.createTextNode(data.moment));
    }
    if (data.advice) {
      box.appendChild(el("br"));
      box.appendChild(el("b", null, "What to do: "));
      box.appendChild(document.createTextNode(data.advice));
    }
    parent.appendChild(box);
  }

  function cell(value, kind) {
    var td = el("td");
    if (kind === "bytes") { td.className = "n"; td.textContent = fmtBytes(value); }
    else if (kind === "number") { td.className = "n"; td.textContent = typeof value === "number" ? value.toLocaleString() : String(value); }
    else if (kind === "site") { td.className = "site"; td.textContent = String(value); }
    else { td.textContent = value === null || value === undefined ? "-" : String(value); }
    return td;
  }

  function renderFacts(section, parent) {
    var tableNode = el("table", { "class": "facts" });
    section.data.rows.forEach(function (row) {
      var tr = el("tr");
      tr.appendChild(el("th", null, row[0]));
      tr.appendChild(cell(row[1][1], row[1][0]));
      tableNode.appendChild(tr);
    });
    parent.appendChild(tableNode);
    (section.data.warnings || []).forEach(function (warning) {
      parent.appendChild(el("p", { "class": "warn" }, "warning: " + warning));
    });
  }

  function renderTable(section, parent) {
    var data = section.data;
    if (data.note) { parent.appendChild(el("p", { "class": "note" }, data.note)); }
    if (!data.rows.length) { return; }
    var tableNode = el("table");
    var head = el("tr");
    data.columns.forEach(function (column) {
      head.appendChild(el("th", { "class": column.kind === "bytes" || column.kind === "number" ? "n" : "" }, column.label));
    });
    tableNode.appendChild(head);
    data.rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (value, index) { tr.appendChild(cell(value, data.columns[index].kind)); });
      tableNode.appendChild(tr);
    });
    parent.appendChild(tableNode);
    if (data.hidden) { parent.appendChild(el("p", { "class": "note" }, plural(data.hidden, "more row") + " not shown.")); }
  }

  /* ---------- call tree (icicle) ---------- */

  function renderTree(section, parent) {
    var data = section.data;
    parent.appendChild(el("p", { "class": "note" }, data.moment + ". Click a frame to zoom into it."));
    var holder = el("div", { "class": "icicle" });
    var back = el("button", { "type": "button" }, "whole tree");
    var controls = el("div", { "class": "controls" });
    controls.appendChild(back);
    parent.appendChild(controls);
    parent.appendChild(holder);
    function show(root) {
      holder.textContent = "";
      holder.appendChild(iceNode(root, root.bytes || 1, 0, show, root.bytes || 1));
    }
    back.addEventListener("click", function () { show(data.root); });
    show(data.root);
  }

  function iceNode(node, parentBytes, depth, show, rootBytes) {
    var box = el("div", { "class": "ice" });
    box.style.width = Math.max(100 * node.bytes / parentBytes, 0.5) + "%";
    var label = node.name + " · " + fmtBytes(node.bytes);
    var calls = node.calls && node.calls.length ? "\ncalls " + node.calls.join("\ncalls ") : "";
    var bar = el("div", { "class": "bar", "title": label + calls }, label);
    bar.style.background = depth % 2 ? "#d4e1f3" : "#e3ecf8";
    bar.addEventListener("click", function () {
      show(node.merged ? { name: node.name, bytes: node.bytes, children: node.merged } : node);
    });
    box.appendChild(bar);
    if (node.children && node.children.length) {
      var kids = el("div", { "class": "kids" });
      readable(node.children, rootBytes).forEach(function (child) {
        kids.appendChild(iceNode(child, node.bytes || 1, depth + 1, show, rootBytes));
      });
      box.appendChild(kids);
    }
    return box;
  }

  var SLIVER = 0.01;  /* of the tree shown: narrower frames (under ~9 px) are merged into one */

  /* Children as drawn: those narrower than SLIVER of the shown tree become one node naming
   * how many they are (click it to see them), so no frame is an unreadable sliver. */
  function readable(children, rootBytes) {
    var wide = [], thin = [];
    children.forEach(function (child) { (child.bytes < SLIVER * rootBytes ? thin : wide).push(child); });
    if (thin.length < 2) { return children; }
    var bytes = thin.reduce(function (sum, child) { return sum + child.bytes; }, 0);
    wide.push({ name: "<" + thin.length + " smaller frames>", bytes: bytes, children: [], merged: thin });
    return wide;
  }

  /* ---------- segments at a moment ---------- */

  var segmentViews = {};

  function renderSegments(section, parent) {
    var data = section.data;
    var header = el("p", { "class": "note" });
    var legend = el("div", { "class": "legend" });
    data.kinds.forEach(function (kind) {
      legend.appendChild(el("span", { "class": "key", "style": "background:" + (KIND_COLORS[kind] || "#999") }));
      legend.appendChild(document.createTextNode(kind));
    });
    legend.appendChild(el("span", { "class": "key", "style": "background:" + FREE_COLOR + ";border:1px solid #ccd" }));
    legend.appendChild(document.createTextNode("free hole"));
    var rows = el("div", { "class": "segments", "id": section.id });
    parent.appendChild(header);
    parent.appendChild(legend);
    parent.appendChild(rows);
    function show(position) {
      var layouts = data.layouts;
      if (!layouts.length) { return; }
      var best = layouts[0];
      layouts.forEach(function (layout) {
        if (Math.abs(layout.position - position) < Math.abs(best.position - position)) { best = layout; }
      });
      rows.textContent = "";
      rows.setAttribute("data-position", String(best.position));
      var last = layouts[layouts.length - 1].position;
      header.textContent = (best.position === last ? "At the snapshot's moment" : "At trace entry " + best.position.toLocaleString()) +
        ": " + plural(best.segments, "segment") + ", " + fmtBytes(best.reserved) + " reserved. " +
        "Identical segments share one row; segments with free holes come first. Click the timeline to choose another moment.";
      best.rows.forEach(function (row) { rows.appendChild(segmentRow(row, data.kinds)); });
      if (best.hidden_rows) {
        rows.appendChild(el("p", { "class": "note" }, plural(best.hidden_rows, "more row") + " (" + plural(best.hidden_segments, "segment") + ") not drawn: fully used, fewest holes."));
      }
    }
    segmentViews[section.id] = show;
    if (data.layouts.length) { show(data.layouts[data.layouts.length - 1].position); }
  }

  function segmentRow(row, kinds) {
    var line = el("div", { "class": "segrow" });
    var used = row.size ? 100 * (1 - row.free / row.size) : 0;
    var text = (row.count > 1 ? row.count + " × " : "") + fmtBytes(row.size) + " · " + used.toFixed(0) + "% used";
    if (row.free) { text += " · " + fmtBytes(row.free) + " free"; }
    line.appendChild(el("span", { "class": "label" }, text));
    var width = 700;
    var svgNode = sv("svg", { "viewBox": "0 0 " + width + " 12", "width": width, "height": 12, "preserveAspectRatio": "none" });
    svgNode.appendChild(sv("rect", { "x": 0, "y": 0, "width": width, "height": 11, "fill": FREE_COLOR }));
    row.runs.forEach(function (run) {
      var x = run[0] / row.size * width;
      var w = Math.max(run[1] / row.size * width, 0.6);
      var rect = sv("rect", { "x": x.toFixed(1), "y": 0, "width": w.toFixed(1), "height": 11, "fill": KIND_COLORS[kinds[run[2]]] || "#999" });
      rect.appendChild(sv("title", null, kinds[run[2]] + " " + fmtBytes(run[1])));
      svgNode.appendChild(rect);
    });
    line.appendChild(svgNode);
    return line;
  }

  /* ---------- timeline ---------- */

  var W = 900, H = 290, PL = 82, PR = 12, PT = 16, PB = 34;
  var LINES_BELOW = 0.05;  /* movement under this share of the top: lines, not stacked bands */
  var LIVE_COLOR = "#3b6fb6";

  function renderTimeline(section, parent) {
    var data = section.data;
    var state = { mode: "kind", x0: 0, x1: Math.max(data.events || 1, 1), selected: null };
    var controls = el("div", { "class": "controls" });
    var byKind = el("button", { "type": "button", "class": "on" }, "by kind");
    var bySite = el("button", { "type": "button" }, "by site");
    var reset = el("button", { "type": "button" }, "reset zoom");
    [byKind, bySite, reset].forEach(function (b) { controls.appendChild(b); });
    var legend = el("div", { "class": "legend" });
    var note = el("p", { "class": "note" });
    var chart = el("div", { "class": "chart" });
    var tooltip = el("div", { "class": "tooltip" });
    parent.appendChild(controls);
    parent.appendChild(legend);
    parent.appendChild(chart);
    parent.appendChild(note);
    chart.appendChild(tooltip);
    var svgNode = sv("svg", { "viewBox": "0 0 " + W + " " + H, "width": W, "height": H, "class": "timeline" });
    chart.appendChild(svgNode);
    var drawn = null;

    function bands() {
      var prefix = state.mode === "kind" ? "kind:" : "site:";
      var out = [];
      data.columns.forEach(function (name, index) {
        if (name.indexOf(prefix) === 0) { out.push({ name: name.slice(prefix.length), index: index }); }
      });
      return out;
    }

    function color(band, index) {
      return state.mode === "kind" ? (KIND_COLORS[band.name] || "#999") : SITE_COLORS[index % SITE_COLORS.length];
    }

    function pickRows() {
      /* The coarsest level with enough points for the plot's width; zoomed into a band around
       * the peak or an OOM, that band's own finer buckets when they have more to show. */
      var levels = data.levels;
      var chosen = levels[levels.length - 1];
      var enough = (W - PL - PR) / 2;
      var count = function (rows) {
        return rows.filter(function (row) { return row[0] >= state.x0 && row[0] <= state.x1; }).length;
      };
      for (var i = 0; i < levels.length; i++) {
        if (count(levels[i]) >= enough) { chosen = levels[i]; break; }
      }
      (data.bands || []).forEach(function (band) {
        if (state.x0 >= band.from && state.x1 <= band.to && count(chosen) < enough && count(band.rows) > count(chosen)) {
          chosen = band.rows;
        }
      });
      var rows = [];
      for (var j = 0; j < chosen.length; j++) {
        var row = chosen[j];
        var inside = row[0] >= state.x0 && row[0] <= state.x1;
        var nextInside = j + 1 < chosen.length && chosen[j + 1][0] >= state.x0 && chosen[j + 1][0] <= state.x1;
        var prevInside = j > 0 && chosen[j - 1][0] >= state.x0 && chosen[j - 1][0] <= state.x1;
        if (inside || nextInside || prevInside) { rows.push(row); }
      }
      return rows;
    }

    function draw() {
      svgNode.textContent = "";
      legend.textContent = "";
      var rows = pickRows();
      if (!rows.length) { note.textContent = "No allocator events in this range."; drawn = null; return; }
      var all = bands();
      var list = all.filter(function (band) {  /* only what holds memory here: no empty keys */
        return rows.some(function (row) { return row[band.index] > 0; });
      });
      var lo = Infinity, hi = 0, liveLo = Infinity, liveHi = 0;
      rows.forEach(function (row) {
        lo = Math.min(lo, row[3], row[2]); hi = Math.max(hi, row[3], row[2]);
        liveLo = Math.min(liveLo, row[3]); liveHi = Math.max(liveHi, row[3]);
      });
      /* Stacked bands stand on 0, or a band's visible part would pass for its size. Where the
       * movement would be too thin to see from 0, the total and reserved are drawn as lines on
       * an axis that starts near them instead, and no band is stacked. */
      var lines = hi > 0 && hi - lo < LINES_BELOW * hi;
      var y0 = lines ? Math.max(lo - 0.15 * Math.max(hi - lo, hi * 0.02), 0) : 0;
      var y1 = hi + 0.05 * Math.max(hi - y0, 1);
      if (lines) {
        legend.appendChild(el("span", { "class": "key", "style": "background:" + LIVE_COLOR }));
        legend.appendChild(document.createTextNode("live (all " + (state.mode === "kind" ? "kinds" : "sites") + ")"));
      } else {
        list.forEach(function (band) {
          legend.appendChild(el("span", { "class": "key", "style": "background:" + color(band, all.indexOf(band)) }));
          legend.appendChild(document.createTextNode(band.name.length > 60 ? "…" + band.name.slice(-59) : band.name));
        });
      }
      var limitNote = "";
      if (data.limit) {
        if (data.limit <= y1 * 1.3) { y1 = Math.max(y1, data.limit * 1.02); }
        else { limitNote = " Device limit " + fmtBytes(data.limit) + " is above the chart."; }
      }
      var plotW = W - PL - PR, plotH = H - PT - PB;
      var px = function (x) { return PL + (x - state.x0) / Math.max(state.x1 - state.x0, 1e-9) * plotW; };
      var py = function (y) { return PT + plotH - (Math.min(Math.max(y, y0), y1) - y0) / Math.max(y1 - y0, 1) * plotH; };
      var clip = sv("clipPath", { "id": data.segments_id + "-clip" });
      clip.appendChild(sv("rect", { "x": PL, "y": PT, "width": plotW, "height": plotH }));
      svgNode.appendChild(clip);
      ticks(y0, y1).forEach(function (tick) {
        svgNode.appendChild(sv("line", { "x1": PL, "x2": W - PR, "y1": py(tick).toFixed(1), "y2": py(tick).toFixed(1), "class": "grid" }));
        svgNode.appendChild(sv("text", { "x": PL - 6, "y": (py(tick) + 4).toFixed(1), "class": "tick", "text-anchor": "end" }, tickText(tick, y1 - y0)));
      });
      var cumulative = rows.map(function () { return 0; });
      var group = sv("g", { "clip-path": "url(#" + section.id + "-clip)" });
      var xs = rows.map(function (row, i) { return i + 1 < rows.length ? rows[i + 1][0] : state.x1; });
      (lines ? [] : list).forEach(function (band) {
        var upper = rows.map(function (row, i) { return cumulative[i] + row[band.index]; });
        var points = [];
        rows.forEach(function (row, i) {  /* a step chart: a level holds until the next point */
          points.push(px(row[0]).toFixed(1) + "," + py(upper[i]).toFixed(1));
          points.push(px(xs[i]).toFixed(1) + "," + py(upper[i]).toFixed(1));
        });
        for (var i = rows.length - 1; i >= 0; i--) {
          points.push(px(xs[i]).toFixed(1) + "," + py(cumulative[i]).toFixed(1));
          points.push(px(rows[i][0]).toFixed(1) + "," + py(cumulative[i]).toFixed(1));
        }
        var path = sv("polygon", { "points": points.join(" "), "fill": color(band, all.indexOf(band)), "fill-opacity": 0.85, "data-band": band.name });
        group.appendChild(path);
        cumulative = upper;
      });
      if (lines) {
        var live = [];
        rows.forEach(function (row, i) {
          live.push(px(row[0]).toFixed(1) + "," + py(row[3]).toFixed(1));
          live.push(px(xs[i]).toFixed(1) + "," + py(row[3]).toFixed(1));
        });
        group.appendChild(sv("polyline", { "points": live.join(" "), "fill": "none", "stroke": LIVE_COLOR, "stroke-width": 1.5, "class": "live" }));
      }
      var reserved = rows.map(function (row) { return px(row[0]).toFixed(1) + "," + py(row[2]).toFixed(1); });
      group.appendChild(sv("polyline", { "points": reserved.join(" "), "fill": "none", "stroke": "#1d2430", "stroke-dasharray": "3 2", "stroke-width": 1 }));
      svgNode.appendChild(group);
      markerLabels(data.markers, state, px).forEach(function (group) {
        group.xs.forEach(function (x, i) {
          svgNode.appendChild(sv("line", { "x1": x.toFixed(1), "x2": x.toFixed(1), "y1": PT, "y2": PT + plotH, "class": "marker " + (group.kinds[i] === "peak" ? "peak" : "oom") }));
        });
        svgNode.appendChild(sv("text", { "x": group.xs[0].toFixed(1), "y": PT - 4, "class": "tick marker-label", "text-anchor": "middle" }, group.text));
      });
      if (data.limit && data.limit <= y1) {
        svgNode.appendChild(sv("line", { "x1": PL, "x2": W - PR, "y1": py(data.limit).toFixed(1), "y2": py(data.limit).toFixed(1), "class": "limit" }));
        svgNode.appendChild(sv("text", { "x": W - PR - 4, "y": (py(data.limit) - 4).toFixed(1), "class": "tick", "text-anchor": "end" }, "device limit " + fmtBytes(data.limit)));
      }
      if (state.selected !== null && state.selected >= state.x0 && state.selected <= state.x1) {
        var sx = px(state.selected).toFixed(1);
        svgNode.appendChild(sv("line", { "x1": sx, "x2": sx, "y1": PT, "y2": PT + plotH, "class": "selected" }));
      }
      svgNode.appendChild(sv("text", { "x": PL, "y": H - 8, "class": "tick" }, Math.round(state.x0).toLocaleString()));
      svgNode.appendChild(sv("text", { "x": W - PR, "y": H - 8, "class": "tick", "text-anchor": "end" }, Math.round(state.x1).toLocaleString()));
      svgNode.appendChild(sv("text", { "x": PL + plotW / 2, "y": H - 8, "class": "tick", "text-anchor": "middle" }, "trace entry (allocator event number)"));
      var overlay = sv("rect", { "x": PL, "y": PT, "width": plotW, "height": plotH, "fill": "transparent", "class": "overlay" });
      svgNode.appendChild(overlay);
      var what = state.mode === "kind" ? "by kind" : "by site (biggest at the peak)";
      note.textContent = (lines
        ? "Live bytes move by " + fmtBytes(liveHi - liveLo) + " of " + fmtBytes(liveHi) + ", too little to see from 0: solid line live, dashed line reserved, the y axis from " +
          fmtBytes(y0) + ". "
        : "Stacked live bytes " + what + ", from 0; dashed line: reserved. ") +
        data.events.toLocaleString() + (data.events === 1 ? " trace entry" : " trace entries") + ", each point the highest moment of its bucket." + limitNote +
        (lines ? " Hover for the bytes " + what : " Hover for a band's stack") + ", click to see the segments then, drag to zoom.";
      drawn = { rows: rows, list: list, px: px, py: py, y0: y0, y1: y1, plotW: plotW, plotH: plotH, lines: lines };
    }

    function toData(event) {
      var box = svgNode.getBoundingClientRect();
      var x = (event.clientX - box.left) / box.width * W;
      var y = (event.clientY - box.top) / box.height * H;
      return { x: x, y: y, position: state.x0 + (x - PL) / (W - PL - PR) * (state.x1 - state.x0) };
    }

    function nearestRow(position) {
      var rows = drawn.rows, best = rows[0];
      rows.forEach(function (row) { if (Math.abs(row[0] - position) < Math.abs(best[0] - position)) { best = row; } });
      return best;
    }

    function hover(event) {
      if (!drawn) { return; }
      var point = toData(event);
      if (point.x < PL || point.x > W - PR || point.y < PT || point.y > H - PB) { tooltip.style.display = "none"; return; }
      var row = nearestRow(point.position);
      var value = drawn.y0 + (PT + drawn.plotH - point.y) / drawn.plotH * (drawn.y1 - drawn.y0);
      var cumulative = 0, band = null;
      for (var i = 0; i < drawn.list.length; i++) {
        var size = row[drawn.list[i].index];
        if (value >= cumulative && value < cumulative + size) { band = drawn.list[i]; break; }
        cumulative += size;
      }
      if (band === null) {
        for (var k = drawn.list.length - 1; k >= 0; k--) { if (row[drawn.list[k].index] > 0) { band = drawn.list[k]; break; } }
      }
      tooltip.textContent = "";
      var when = "trace entry " + row[0].toLocaleString();
      if (row[1] !== null && data.levels[0].length && data.levels[0][0][1] !== null) {
        when += ", " + ((row[1] - data.levels[0][0][1]) / 1e6).toFixed(3) + " s";
      }
      tooltip.appendChild(el("div", null, when + " · " + fmtBytes(row[3]) + " live · " + fmtBytes(row[2]) + " reserved"));
      if (drawn.lines) {  /* no band under the pointer: each one's bytes then */
        drawn.list.forEach(function (each) {
          if (row[each.index] > 0) { tooltip.appendChild(el("div", null, each.name + ": " + fmtBytes(row[each.index]))); }
        });
        band = null;
      }
      if (band) {
        tooltip.appendChild(el("b", { "class": "band" }, band.name + ": " + fmtBytes(row[band.index])));
        var site = state.mode === "kind" ? data.kind_site[band.name] : band.name;
        var stack = site ? data.stacks[site] : null;
        var text = stack ? stack.join("\n") : (state.mode === "site" ? "many sites, each smaller than the ones shown" : "no stack recorded for this kind at the peak");
        if (state.mode === "kind" && site) { tooltip.appendChild(el("div", null, "biggest site of this kind at the peak:")); }
        tooltip.appendChild(el("pre", { "class": "stack" }, text));
      }
      tooltip.style.display = "block";
      var box = chart.getBoundingClientRect();
      var left = event.clientX - box.left + 14;
      tooltip.style.left = Math.min(left, Math.max(box.width - 420, 0)) + "px";
      tooltip.style.top = (event.clientY - box.top + 14) + "px";
    }

    var dragStart = null;
    svgNode.addEventListener("mousemove", hover);
    svgNode.addEventListener("mouseleave", function () { tooltip.style.display = "none"; });
    svgNode.addEventListener("mousedown", function (event) { dragStart = toData(event); });
    svgNode.addEventListener("mouseup", function (event) {
      if (!dragStart || !drawn) { return; }
      var end = toData(event);
      var start = dragStart;
      dragStart = null;
      if (Math.abs(end.x - start.x) > 6) {
        var a = Math.max(Math.min(start.position, end.position), 0);
        var b = Math.min(Math.max(start.position, end.position), data.events);
        if (b - a >= 2) { state.x0 = a; state.x1 = b; draw(); }
        return;
      }
      state.selected = nearestRow(end.position)[0];
      var show = segmentViews[data.segments_id];
      if (show) { show(state.selected); }
      draw();
    });
    byKind.addEventListener("click", function () { state.mode = "kind"; byKind.className = "on"; bySite.className = ""; draw(); });
    bySite.addEventListener("click", function () { state.mode = "site"; bySite.className = "on"; byKind.className = ""; draw(); });
    reset.addEventListener("click", function () { state.x0 = 0; state.x1 = Math.max(data.events, 1); draw(); });
    draw();
  }

  var MARKER_GAP = 44;  /* px: marker labels closer than this would overprint */

  /* The visible markers grouped left to right: markers closer than MARKER_GAP share one
   * label ("peak · OOM") at the first one's x, so coinciding labels never overprint. */
  function markerLabels(markers, state, px) {
    var shown = markers.filter(function (m) { return m.position >= state.x0 && m.position <= state.x1; })
      .map(function (m) { return { x: px(m.position), label: m.label }; })
      .sort(function (a, b) { return a.x - b.x; });
    var groups = [];
    shown.forEach(function (m) {
      var last = groups[groups.length - 1];
      if (!last || m.x - last.xs[last.xs.length - 1] >= MARKER_GAP) {
        groups.push({ xs: [m.x], kinds: [m.label], text: m.label });
        return;
      }
      last.xs.push(m.x);
      last.kinds.push(m.label);
      if (last.text.split(" · ").indexOf(m.label) < 0) { last.text += " · " + m.label; }
    });
    return groups;
  }

  /* A tick's label, in MiB where the axis spans too little for GiB with two decimals to
   * tell its ticks apart. */
  function tickText(value, span) {
    if (value >= 1073741824 && span < 256 * 1048576) {
      return (value / 1048576).toLocaleString(undefined, { maximumFractionDigits: 1 }) + " MiB";
    }
    return fmtBytes(value);
  }

  function ticks(lo, hi) {
    var span = hi - lo;
    if (span <= 0) { return [lo]; }
    var units = [1073741824, 1048576, 1024, 1];
    var unit = 1;
    for (var i = 0; i < units.length; i++) { if (span >= 2 * units[i]) { unit = units[i]; break; } }
    var raw = span / unit / 5;
    var magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    var step = unit;
    for (var k = 0; k < steps.length; k++) { if (steps[k] * magnitude >= raw) { step = steps[k] * magnitude * unit; break; } }
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi; t += step) { out.push(t); }
    return out;
  }

  /* ---------- page ---------- */

  var RENDER = {
    verdict: renderVerdict, facts: renderFacts, table: renderTable, tree: renderTree,
    segments: renderSegments, timeline: renderTimeline
  };

  function renderSection(section, parent) {
    var box = el("div", { "class": "section", "data-section": section.id, "data-type": section.type });
    if (section.type !== "verdict") { box.appendChild(el("h3", null, section.title)); }
    if (section.empty) { box.appendChild(el("p", { "class": "empty" }, section.empty)); }
    parent.appendChild(box);
    var draw = RENDER[section.type];
    var drawable = section.type === "segments" ? section.data.layouts.length : !section.empty;
    if (draw && drawable) { draw(section, box); }
    else if (!draw) { box.appendChild(el("p", { "class": "empty" }, "This report's page cannot draw a '" + section.type + "' section; update memforensics.")); }
  }

  function render() {
    var root = document.getElementById("mf-root");
    document.getElementById("mf-meta").textContent = plural(DATA.dumps.length, "dump") +
      " · generated " + DATA.generated + " by memforensics " + DATA.version;
    if (DATA.run.length) {
      var run = el("section", { "class": "run" });
      DATA.run.forEach(function (section) { renderSection(section, run); });
      root.appendChild(run);
    }
    if (!DATA.dumps.length) {
      root.appendChild(el("p", { "class": "empty" }, "No dump could be read: see the list of unreadable files above."));
    }
    DATA.dumps.forEach(function (dump) {
      var section = el("section", { "class": "dump" });
      section.appendChild(el("h2", null, dump.name));
      if (dump.devices.length > 1) {
        section.appendChild(el("p", { "class": "note" }, "This file holds " + dump.devices.length + " devices: " +
          dump.devices.map(function (d) { return d.label; }).join(", ") + ". Each has its own section below."));
      }
      dump.devices.forEach(function (device) {
        var box = el("div", { "class": "device", "id": device.key });
        if (dump.devices.length > 1) { box.appendChild(el("h4", null, device.label)); }
        device.sections.forEach(function (part) { renderSection(part, box); });
        section.appendChild(box);
      });
      root.appendChild(section);
    });
  }

  render();
}());
