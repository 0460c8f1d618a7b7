// A file that html/unlinked.html names without a link.
