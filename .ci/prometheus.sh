# Debian's Prometheus (prometheus and promtool), which the observability tests run, installed one
# way for ./test.sh and the PR workflow alike (source it; it defines a function and runs nothing):
#   ensure_prometheus   installs Debian's prometheus package when either program is missing and this
#                       user may (root, or passwordless sudo, and apt-get); otherwise, or when that
#                       fails, says so in one line on stderr and returns 2

ensure_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    return 0
  fi
  local as_root=()
  [[ "$(id -u)" == 0 ]] || as_root=(sudo -n)
  if ! command -v apt-get >/dev/null || { [[ ${#as_root[@]} != 0 ]] && ! sudo -n true 2>/dev/null; }; then
    echo "test.sh: the full run needs Prometheus and promtool, which this user cannot install here (it takes" \
         "root or passwordless sudo, and apt-get): install Debian's package with \`sudo apt-get install" \
         "prometheus\`, or run ./test.sh --unit, which skips what needs them" >&2
    return 2
  fi
  echo "== installing Debian's prometheus package (prometheus, promtool)"
  if ! "${as_root[@]}" apt-get update -qq \
      || ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
      || ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    echo "test.sh: installing Debian's prometheus package failed (apt-get's message is above): install it" \
         "with \`sudo apt-get install prometheus\`, or run ./test.sh --unit, which skips what needs it" >&2
    return 2
  fi
}
