#!/usr/bin/python3
"""deploy/netlab.py up|down|status|hosts|exec|cut|heal|slow|restore ...: the network lab's command line
(ffdeploy.netlab, also the console script ff-netlab), run from the source tree."""

import sys

from ffdeploy.netlab import main  # (deploy/, this script's folder, is on the path)

if __name__ == "__main__":
    sys.exit(main())
