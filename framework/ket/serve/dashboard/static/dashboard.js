// ket dashboard: live pages. A page whose <main> says data-refresh="N" is fetched again every
// N seconds while it is shown, and its <main> replaced by the new one's when what it shows
// changed; the operator can pause it. The control that had the keyboard focus keeps it (the
// same link, button or field in the new content), the tables keep their scroll, and a polite
// status line tells a screen reader that the page was updated. Served from the package (the
// CSP allows no inline script); no framework.
"use strict";

(function () {
  const main = document.getElementById("main");
  if (!main || !main.dataset.refresh) return;
  const seconds = Math.max(1, Number(main.dataset.refresh) || 5);
  const status = document.getElementById("live-status");
  let paused = sessionStorage.getItem("ket-live") === "off";

  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "link live";
  const label = () => {
    toggle.textContent = paused ? "Live: paused (resume)" : "Live: on (pause)";
    toggle.setAttribute("aria-pressed", paused ? "false" : "true");
  };
  label();
  toggle.addEventListener("click", () => {
    paused = !paused;
    sessionStorage.setItem("ket-live", paused ? "off" : "on");
    label();
  });
  const who = document.querySelector("header.top .who");
  if (who) who.prepend(toggle);

  // what a page shows, without the CSRF tokens its forms carry (new at every render)
  const shown = (html) => html.replace(/name="csrf" value="[^"]*"/g, "");

  function pathOf(node) {
    const path = [];
    while (node && node !== main) {
      path.unshift(Array.prototype.indexOf.call(node.parentNode.children, node));
      node = node.parentNode;
    }
    return path;
  }

  function nodeAt(path) {
    let node = main;
    for (const index of path) {
      node = node && node.children[index];
    }
    return node || null;
  }

  // how to find the focused control again in the new content
  function signature(element) {
    if (!element || !main.contains(element) || element === main) return null;
    const form = element.closest("form");
    return {
      tag: element.tagName,
      href: element.getAttribute("href"),
      action: form ? form.getAttribute("action") : null,
      label: element.getAttribute("aria-label"),
      text: element.textContent.trim(),
      path: pathOf(element),
    };
  }

  function restore(wanted) {
    const same = (element) => {
      const form = element.closest("form");
      return element.getAttribute("href") === wanted.href
        && (form ? form.getAttribute("action") : null) === wanted.action
        && element.getAttribute("aria-label") === wanted.label
        && element.textContent.trim() === wanted.text;
    };
    let found = Array.prototype.find.call(main.getElementsByTagName(wanted.tag), same);
    if (!found) {
      const there = nodeAt(wanted.path);
      if (there && there.tagName === wanted.tag) found = there;
    }
    if (found) found.focus({ preventScroll: true });
  }

  async function refresh() {
    if (paused || document.hidden) return;
    const active = document.activeElement;
    if (active && main.contains(active) && active.matches("select, input, textarea")) return;
    let answer;
    try {
      answer = await fetch(location.href, { credentials: "same-origin", headers: { "X-Ket-Refresh": "1" } });
    } catch (error) {
      return; // the server is away for a moment: try again at the next tick
    }
    if (answer.status === 401 || answer.status === 403) { location.reload(); return; }
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("main");
    if (!fresh || shown(fresh.innerHTML) === shown(main.innerHTML)) return;
    const focused = signature(document.activeElement);
    const scrolled = Array.from(main.querySelectorAll("div.table"), (box) => box.scrollLeft);
    main.replaceChildren(...fresh.childNodes);
    main.querySelectorAll("div.table").forEach((box, index) => { box.scrollLeft = scrolled[index] || 0; });
    if (focused) restore(focused);
    if (status) status.textContent = "Updated at " + new Date().toLocaleTimeString();
  }

  setInterval(refresh, seconds * 1000);
})();
