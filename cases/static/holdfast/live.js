// A page that is open never lies for long (templates/admin/_live_banner.html): the live
// region just before this script polls its JSON endpoint. A queue says when it is out of date
// (with a Reload button); a case page (data-live-swap) fetches itself again and swaps its
// [data-live-region] elements in place, keeping any region in which the person is typing.
// A file of its own, not inline: the Content-Security-Policy allows scripts from 'self' only.
(function () {
  "use strict";
  var region = document.currentScript.previousElementSibling;
  var url = region.dataset.liveUrl;
  var rendered = region.dataset.liveVersion;
  var noun = region.dataset.liveNoun;
  var swapUrl = region.dataset.liveSwap || "";
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

  function note(text) {
    shown = "";
    var line = document.createElement("p");
    line.className = "hf-live-note";
    line.textContent = text;
    region.replaceChildren(line);
  }

  // A field whose value the person changed and has not sent, or the field they are in now.
  function typing(area) {
    var fields = area.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden" || f.type === "submit" || f.type === "button") { continue; }
      if (f === document.activeElement && f.tagName !== "SELECT") { return true; }
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) { return true; }
      } else if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) { return true; }
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function openDetails(area) {
    var open = {};
    area.querySelectorAll("details[open] > summary").forEach(function (s) {
      open[s.textContent.trim()] = true;
    });
    return open;
  }

  // Swap each region of the page for the same region of ``doc``; returns the regions kept.
  function swapRegions(doc, version) {
    var kept = [];
    document.querySelectorAll("[data-live-region]").forEach(function (old) {
      var name = old.dataset.liveRegion;
      var fresh = doc.querySelector('[data-live-region="' + name + '"]');
      if (!fresh) { return; }
      if (typing(old)) {
        kept.push(old);
        var warn = old.querySelector(".hf-live-kept");
        if (!warn) {
          warn = document.createElement("p");
          warn.className = "hf-live-kept";
          old.prepend(warn);
        }
        warn.textContent = "The case changed while you were typing here (now version " +
          version + "): what you typed is kept. Check the new state above before you send " +
          "it; if it no longer fits, the case refuses it and nothing is overwritten.";
        return;
      }
      var open = openDetails(old);
      var node = document.importNode(fresh, true);
      node.querySelectorAll("details > summary").forEach(function (s) {
        if (open[s.textContent.trim()]) { s.parentElement.open = true; }
      });
      old.replaceWith(node);
    });
    // The admin's own form below: its read-only rows (status, version, waiting on, …) and
    // its inline tables, each matched by its field or its id; a row or table with a field
    // the person changed is kept.
    document.querySelectorAll("#content-main .form-row").forEach(function (row) {
      if (!row.querySelector(".readonly")) { return; }
      if (row.querySelector("input:not([type=hidden]), select, textarea")) { return; }
      var key = [].filter.call(row.classList, function (c) { return c.indexOf("field-") === 0; });
      if (!key.length) { return; }
      var fresh = doc.querySelector("#content-main .form-row." + key.join("."));
      if (fresh) { row.replaceWith(document.importNode(fresh, true)); }
    });
    document.querySelectorAll("#content-main .inline-group[id]").forEach(function (group) {
      var fresh = doc.getElementById(group.id);
      if (!fresh || typing(group)) { return; }
      group.replaceWith(document.importNode(fresh, true));
    });
    return kept;
  }

  function swap(body) {
    var headers = { Accept: "text/html", "X-Holdfast-Live": "1" };
    return fetch(swapUrl, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector(".hf-live[data-live-version]");
        var version = fresh ? fresh.dataset.liveVersion : String(body.version);
        var kept = swapRegions(doc, version);
        rendered = version;
        region.dataset.liveVersion = version;
        var title = doc.querySelector("title");
        if (title) { document.title = title.textContent; }
        note(body.reference + " updated in place: now " + body.status_display + " (version " +
          version + ")" + (kept.length ? "; your unsent text is kept." : "."));
      })
      .catch(function () { show(message(body)); });
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
      if (current === rendered) {
        if (shown) { clear(); }
      } else if (swapUrl && !("digest" in body)) {
        return swap(body);
      } else {
        show(message(body));
      }
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
          return handle(response.status, body);
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
