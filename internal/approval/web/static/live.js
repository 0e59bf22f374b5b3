// Live updates: reload list pages when an action or session changes.
// The page works without this script.
(function () {
  if (!window.EventSource || document.body.dataset.live !== "reload") return;
  var es = new EventSource("/ui/events");
  var pending = null;
  es.addEventListener("changed", function () {
    if (pending) return;
    pending = setTimeout(function () { location.reload(); }, 150);
  });
})();
