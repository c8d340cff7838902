"""Runs one rank of a multi-process test: `rank_runner.py MODULE:FUNCTION [JSON_ARGS]`.

The function (in a module beside this file) runs with the rank's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, HFREDUCE_NODE_ID, ...) and returns a JSON-serialisable result, printed
on the last line as `RESULT <json>`. An exception exits with code 1 after printing it.
"""

import importlib
import json
import os
import sys
import traceback


def main():
    target = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        result = function(*args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
