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
