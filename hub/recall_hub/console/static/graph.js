// The graph page: loads /api/groups/{id}/graph (the address is in #graph's data-api) and draws it with
// cytoscape. Bead text is only ever set as text (textContent), never as markup.
(function () {
  "use strict";
  var container = document.getElementById("graph");
  if (!container) { return; }
  var status = document.getElementById("graph-status");
  var panelTitle = document.getElementById("panel-title");
  var panelBody = document.getElementById("panel-body");
  var list = document.getElementById("node-list");

  function text(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) { el.className = cls; }
    return el;
  }

  function show(node) {
    panelTitle.textContent = node.title;
    panelBody.textContent = "";
    panelBody.className = "";
    var facts = document.createElement("dl");
    facts.className = "facts";
    [["Type", node.type], ["Importance", String(node.importance)], ["Created", node.created_at],
     ["By", node.created_by], ["Tags", node.tags.join(", ") || "—"], ["Session", node.session_id || "—"],
     ["Status", node.status]].forEach(function (pair) {
      facts.appendChild(text("dt", pair[0]));
      facts.appendChild(text("dd", pair[1]));
    });
    panelBody.appendChild(facts);
    var link = text("a", "Open the bead");
    link.href = "/beads/" + encodeURIComponent(node.id);
    panelBody.appendChild(link);
  }

  fetch(container.dataset.api, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
    .then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) { throw new Error(body.error || ("HTTP " + response.status)); }
        return body;
      });
    })
    .then(function (data) {
      var byId = {};
      var elements = [];
      data.nodes.forEach(function (n) {
        byId[n.id] = n;
        elements.push({ data: { id: n.id, label: n.title, colour: data.type_colours[n.type] || "#444",
                                size: 12 + 4 * n.importance } });
        var item = document.createElement("li");
        var button = text("button", n.title + " (" + n.type + ", importance " + n.importance + ")", "secondary");
        button.type = "button";
        button.addEventListener("click", function () { show(n); if (cy) { cy.$id(n.id).select(); } });
        item.appendChild(button);
        list.appendChild(item);
      });
      data.edges.forEach(function (edge, i) {
        elements.push({ data: { id: "e" + i, source: edge.source, target: edge.target, type: edge.type,
                                colour: data.edge_colours[edge.type] || "#999" } });
      });
      var cy = window.cytoscape({
        container: container,
        elements: elements,
        wheelSensitivity: 0.3,
        style: [
          { selector: "node", style: { "background-color": "data(colour)", "width": "data(size)",
                                       "height": "data(size)", "label": "", "border-width": 1, "border-color": "#222" } },
          { selector: "node:selected", style: { "border-width": 4, "border-color": "#ffbf47", "label": "data(label)",
                                                "font-size": 10, "text-wrap": "ellipsis", "text-max-width": 160 } },
          { selector: "edge", style: { "line-color": "data(colour)", "width": 1.5, "curve-style": "bezier",
                                       "target-arrow-shape": "triangle", "target-arrow-color": "data(colour)" } }
        ],
        layout: data.nodes.length <= 300 ? { name: "cose", animate: false } :
          { name: "concentric", concentric: function (node) { return byId[node.id()].importance; },
            levelWidth: function () { return 1; }, animate: false }
      });
      // A stable handle for scripts and tests (the page's own code keeps using `cy`).
      window.recallGraph = cy;
      cy.on("tap", "node", function (event) { show(byId[event.target.id()]); });
      var note = data.nodes.length + " beads, " + data.edges.length + " relationships";
      if (!data.edges_complete) {
        note += " (relationships read for the newest " + data.edges_read_for + " beads shown)";
      }
      if (data.list_limit_reached) { note += "; only the newest " + data.listed + " beads of the group were read"; }
      status.textContent = note + ".";
    })
    .catch(function (error) {
      status.textContent = "The graph could not be loaded: " + error.message;
      status.setAttribute("role", "alert");
    });
})();
