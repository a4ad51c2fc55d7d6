/* Attention, Executed: small fixes to the theme's page behaviour.

   1. Navigation buttons. The theme binds its sidebar handlers to the first element with the
      class primary-toggle / secondary-toggle on the page, a header icon that this book's
      layout hides; the buttons a reader sees then do nothing. Each visible toggle forwards
      its click to that first element, which runs the theme's own handler (a dialog on narrow
      screens, a collapsing sidebar on wide ones).
   2. Figures open enlarged on click, tap or Enter, and close on click or Escape. */
(function () {
  "use strict";

  function forwardToggles(selector) {
    var all = document.querySelectorAll(selector);
    if (all.length < 2) return;
    var handler = all[0];
    for (var i = 1; i < all.length; i++) {
      all[i].addEventListener("click", function (event) {
        event.preventDefault();
        event.stopPropagation();
        handler.click();
      });
    }
  }

  function zoom(img) {
    var overlay = document.createElement("div");
    overlay.className = "book-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", "Enlarged figure; press Escape to close");
    overlay.tabIndex = -1;
    var big = img.cloneNode();
    big.removeAttribute("width");
    big.removeAttribute("height");
    big.style.setProperty("--zoom-width", img.naturalWidth + "px");
    overlay.appendChild(big);
    function close() {
      overlay.remove();
      document.removeEventListener("keydown", onKey);
      img.focus();
    }
    function onKey(event) {
      if (event.key === "Escape") close();
    }
    overlay.addEventListener("click", close);
    document.addEventListener("keydown", onKey);
    document.body.appendChild(overlay);
    overlay.focus();
  }

  function enlargeableFigures() {
    var images = document.querySelectorAll(
      ".bd-article .cell_output img, .bd-article figure img");
    images.forEach(function (img) {
      img.tabIndex = 0;
      img.setAttribute("title", "Click to enlarge");
      // Sphinx wraps a figure shown below its full size in a link to the image file;
      // the overlay replaces that link (without scripts the link still works).
      img.addEventListener("click", function (event) {
        event.preventDefault();
        zoom(img);
      });
      img.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          zoom(img);
        }
      });
    });
  }

  function ready() {
    forwardToggles(".primary-toggle");
    forwardToggles(".secondary-toggle");
    enlargeableFigures();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }
})();
