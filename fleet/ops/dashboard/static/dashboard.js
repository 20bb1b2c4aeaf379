// fleet dashboard: refreshes each page's live part from the server, without reloading the page.
// The server renders the part (escaped HTML); nothing here builds markup from data.
(function () {
  "use strict";
  var live = document.querySelector("[data-live]");
  var stamp = document.getElementById("updated");
  if (!live) { return; }
  var every = Math.max(500, Number(live.getAttribute("data-every") || "3") * 1000);
  var busy = false;

  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (res) {
        if (!res.ok) { throw new Error("HTTP " + res.status); }
        return res.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        document.body.classList.remove("stale");
        live.setAttribute("data-refreshed", String(Date.now()));
        if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
      })
      .catch(function (err) {
        document.body.classList.add("stale");
        if (stamp) { stamp.textContent = "not updated: " + err.message; }
      })
      .then(function () { busy = false; });
  }

  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);

  // Choosing a verdict filters at once.
  var verdict = document.getElementById("filter-verdict");
  if (verdict && verdict.form) {
    verdict.addEventListener("change", function () { verdict.form.submit(); });
  }
})();
