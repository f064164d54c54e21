// /api/redoc/: ReDoc's sidebar logo <img> from https://cdn.redoc.ly (blocked by the Content-Security-Policy's img-src,
// unreachable offline) gets the empty image as its src, set as an attribute or as the property (new-user trial 14,
// F20). Loaded before ReDoc (templates/drf_spectacular/redoc.html); a file, not an inline script (the CSP has no
// 'unsafe-inline').
(function () {  // ReDoc's logo <img>: its src, set as an attribute or as the property, is the empty image
  var EMPTY = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E";
  function local(value) { return /^https:\/\/cdn\.redoc\.ly\//.test(String(value)) ? EMPTY : value; }
  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    return setAttribute.call(this, name, this.tagName === "IMG" && name === "src" ? local(value) : value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true, enumerable: src.enumerable, get: src.get,
    set: function (value) { src.set.call(this, local(value)); }
  });
})();
