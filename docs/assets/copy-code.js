// Console examples (```pycon blocks, and the docstring examples on the API page) are
// doctests: pytest runs them as written. A reader copies code, not a session: the copy
// button of such a block copies its statements alone, without the ">>> " and "... "
// prompts, the output lines or "# doctest:" directives. Material's copy button takes the
// text of the nearest [data-copy] attribute when there is one, so the plain code is put
// there. The prompts are hidden on screen too (extra.css); output stays, greyed.
(function () {
  "use strict";
  var DIRECTIVE = /\s*#\s*doctest:.*$/;

  function plainCode(text) {
    var lines = [];
    var inBlock = false; // after a continuation line: a compound statement is open
    var inOutput = false; // after an output line, "..." is output too (doctest's ELLIPSIS)
    text.split("\n").forEach(function (line) {
      var prompt = line.slice(0, 4);
      if (prompt === ">>> " || line === ">>>") {
        if (inBlock) lines.push(""); // a compound statement ended: a REPL needs a blank line
        inBlock = inOutput = false;
        lines.push(line.slice(4).replace(DIRECTIVE, ""));
      } else if (!inOutput && (prompt === "... " || line === "...")) {
        inBlock = true;
        lines.push(line.slice(4).replace(DIRECTIVE, ""));
      } else {
        inOutput = true; // output: left out
      }
    });
    return lines.join("\n").replace(/\s+$/, "") + "\n";
  }

  function markConsoleBlocks() {
    document.querySelectorAll(".language-pycon").forEach(function (box) {
      var code = box.querySelector("pre > code");
      if (!code) return;
      box.setAttribute("data-copy", plainCode(code.textContent));
      code.querySelectorAll(".c1").forEach(function (comment) {
        if (/^#\s*doctest:/.test(comment.textContent)) comment.classList.add("doctest-directive");
      });
    });
  }

  // Material swaps pages without reloading (instant navigation): document$ emits each time.
  if (typeof document$ !== "undefined") {
    document$.subscribe(markConsoleBlocks);
  } else {
    document.addEventListener("DOMContentLoaded", markConsoleBlocks);
  }
})();
