// The live feed page: appends each change of the group's server-sent event stream to #feed, as text.
(function () {
  "use strict";
  var list = document.getElementById("feed");
  if (!list || !window.EventSource) { return; }
  var status = document.getElementById("feed-status");
  var source = new EventSource(list.dataset.events);

  function add(change) {
    var item = document.createElement("li");
    var when = document.createElement("time");
    when.dateTime = change.at;
    when.textContent = change.at.replace("T", " ").slice(0, 19);
    item.appendChild(when);
    item.appendChild(document.createTextNode(" " + change.by + " " + change.action + " "));
    var link = document.createElement("a");
    link.href = "/beads/" + encodeURIComponent(change.bead_id);
    link.textContent = change.title || change.bead_id;
    item.appendChild(link);
    if (change.type) { item.appendChild(document.createTextNode(" (" + change.type + ")")); }
    list.appendChild(item);
  }

  source.addEventListener("change", function (event) { add(JSON.parse(event.data)); });
  source.addEventListener("ready", function () { status.textContent = "Live: new changes appear below."; });
  source.addEventListener("end", function (event) {
    status.textContent = "The feed stopped: " + JSON.parse(event.data).reason;
    source.close();
  });
  source.onerror = function () { status.textContent = "Reconnecting…"; };
})();
