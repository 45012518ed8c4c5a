// ket dashboard: live pages. A page whose <main> says data-refresh="N" is fetched again every
// N seconds while it is shown, and its <main> replaced by the new one's; the operator can pause
// it. Served from the package (the CSP allows no inline script); no framework.
"use strict";

(function () {
  const main = document.getElementById("main");
  if (!main || !main.dataset.refresh) return;
  const seconds = Math.max(1, Number(main.dataset.refresh) || 5);
  let paused = sessionStorage.getItem("ket-live") === "off";

  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.className = "link live";
  const label = () => { toggle.textContent = paused ? "Live: paused (resume)" : "Live: on (pause)"; };
  label();
  toggle.addEventListener("click", () => {
    paused = !paused;
    sessionStorage.setItem("ket-live", paused ? "off" : "on");
    label();
  });
  const who = document.querySelector("header.top .who");
  if (who) who.prepend(toggle);

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
    if (fresh) main.replaceChildren(...fresh.childNodes);
  }

  setInterval(refresh, seconds * 1000);
})();
