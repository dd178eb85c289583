(function () {
  "use strict";
  /* Refreshes by fetching this page's own URL (whatever proxy prefix it has) and swapping
     in its <main>; opened details stay open. If the AppMaster is gone (the cluster ended),
     the last state stays on screen under a banner. */
  var REFRESH_MS = 2000;
  var banner = document.getElementById("stale");
  function refresh() {
    fetch(location.href, {cache: "no-store", headers: {Accept: "text/html"}})
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var current = document.querySelector("main");
        current.querySelectorAll("details[open]").forEach(function (d) {
          var same = d.id && fresh.querySelector("#" + CSS.escape(d.id));
          if (same) same.open = true;
        });
        current.replaceWith(fresh);
        banner.hidden = true;
      })
      .catch(function (error) {
        banner.textContent = "The AppMaster did not answer (" + error.message +
          "); showing its last known state.";
        banner.hidden = false;
      })
      .finally(function () { setTimeout(refresh, REFRESH_MS); });
  }
  setTimeout(refresh, REFRESH_MS);

  /* A job's Cancel button: a PUT (YARN's web proxy forwards GET and PUT) relative to
     this page, so through the same proxy, with the session's token (flinkyarn session
     token) in its body; the answer is shown. */
  var said = document.getElementById("said");
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.cancel");
    if (!button) return;
    var token = window.prompt("Cancel job " + button.dataset.name + "?\n" +
      "The session's token (flinkyarn session token):");
    if (!token) return;
    button.disabled = true;
    fetch("api/jobs/" + encodeURIComponent(button.dataset.job) + "/cancel",
          {method: "PUT", cache: "no-store", headers: {"Content-Type": "application/json"},
           body: JSON.stringify({token: token})})
      .then(function (response) {
        return response.json().then(function (body) {
          said.textContent = response.ok ? "Cancelling job " + button.dataset.name + "."
            : "Not cancelled: " + (body.error || "HTTP " + response.status);
        });
      })
      .catch(function (error) { said.textContent = "Not cancelled: " + error.message; })
      .finally(function () { said.hidden = false; button.disabled = false; });
  });
})();
