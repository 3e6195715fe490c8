// Holdfast's admin frame (templates/admin/base_site.html): on a phone-sized screen a table's
// rows become stacked cards, each cell labelled with its column. A file of its own, not
// inline: the Content-Security-Policy allows scripts from 'self' only.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("#content table").forEach(function (table) {
    var heads = [];
    var headRow = table.tHead && table.tHead.rows[0];
    if (!headRow) { return; }
    Array.prototype.forEach.call(headRow.cells, function (cell) {
      var span = cell.colSpan || 1;
      var text = cell.textContent.trim();
      for (var i = 0; i < span; i++) { heads.push(text); }
    });
    Array.prototype.forEach.call(table.tBodies, function (body) {
      Array.prototype.forEach.call(body.rows, function (row) {
        Array.prototype.forEach.call(row.cells, function (cell, index) {
          if (heads[index] && !cell.hasAttribute("data-label")) { cell.setAttribute("data-label", heads[index]); }
        });
      });
    });
  });
});

// A column header with no words (the admin's inline tables start with an unnamed column and
// may end with one) names its column for a screen reader, after the cards took their labels.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("#content thead th").forEach(function (cell) {
    if (cell.textContent.trim() || cell.querySelector("input, select, button")) { return; }
    var words = document.createElement("span");
    words.className = "hf-sr-only";
    words.textContent = cell.classList.contains("original") ? "Row" : "More";
    cell.appendChild(words);
  });
});
