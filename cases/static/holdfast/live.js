// A page that is open never lies for long (templates/admin/_live_banner.html): the live
// region just before this script polls its JSON endpoint and says when the page is out of date.
// A file of its own, not inline: the Content-Security-Policy allows scripts from 'self' only.
(function () {
  "use strict";
  var region = document.currentScript.previousElementSibling;
  var url = region.dataset.liveUrl;
  var rendered = region.dataset.liveVersion;
  var noun = region.dataset.liveNoun;
  var FAST = 3000, SLOW = 30000;
  var delay = FAST, timer = null, busy = false, shown = "";

  function show(text) {
    if (text === shown) { return; }
    shown = text;
    var banner = document.createElement("p");
    banner.className = "hf-live-banner";
    var words = document.createElement("span");
    words.className = "hf-live-text";
    words.textContent = text;
    var reload = document.createElement("button");
    reload.type = "button";
    reload.className = "button";
    reload.textContent = "Reload";
    reload.addEventListener("click", function () { window.location.reload(); });
    banner.append(words, " ", reload);
    region.replaceChildren(banner);
  }

  function clear() {
    shown = "";
    region.replaceChildren();
  }

  function message(body) {
    if ("digest" in body) {
      var plural = body.count === 1 ? noun : noun + "s";
      return "This queue changed since you opened it (" + body.count + " " + plural + " now).";
    }
    return body.reference + " changed since you opened it: now " + body.status_display +
      " (version " + body.version + ").";
  }

  function handle(status, body) {
    if (status === 200 && body) {
      delay = FAST;
      var current = "digest" in body ? body.digest : String(body.version);
      if (current === rendered) { clear(); } else { show(message(body)); }
    } else if (status === 404 && body && body.error === "not_found") {
      delay = SLOW;
      show("This changed since you opened it: " + body.detail);
    } else if (status === 401) {
      delay = SLOW;
      show("Your admin session ended; reload to log in again.");
    } else {
      delay = SLOW;
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = document.hidden ? null : setTimeout(poll, delay);
  }

  function poll() {
    timer = null;
    if (document.hidden || busy) { return; }
    busy = true;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.json().catch(function () { return null; }).then(function (body) {
          handle(response.status, body);
        });
      })
      .catch(function () { delay = SLOW; })
      .then(function () { busy = false; schedule(); });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else if (!busy) {
      poll();
    }
  });
  schedule();
})();
