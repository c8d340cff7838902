# The network lab's shell tests source this (labtest.py is the same for the Python ones), with
# `root` set to the checkout: `lab_test PREFIX NEEDS` refuses to run without root (NEEDS says
# what for) and names the lab PREFIX plus the shell's pid; `lab ARGS` runs deploy/netlab.py on it.
lab_test() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL: needs root ($2); CI runs it as root" >&2
    exit 1
  fi
  name="$1$$"
  name=${name:0:8}
}
lab() { /usr/bin/python3 "$root/deploy/netlab.py" --name "$name" "$@"; }
