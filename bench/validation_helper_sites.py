"""Count the validation-helper calls (transformers 5: torch_compilable_check) in a
transformers package's modeling files that Trap lowers statically, and why it declines
the rest:

    python bench/validation_helper_sites.py /path/to/site-packages/transformers
"""

import collections
import glob
import sys

from graphmend.rewrite.pipeline import mend_module_source


def main(root: str) -> None:
    outcomes: collections.Counter = collections.Counter()
    files = 0
    for path in sorted(glob.glob(root + "/models/*/modeling_*.py")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if "torch_compilable_check(" not in text:
            continue
        files += 1
        for finding in mend_module_source(text, filename=path, scope="all").findings:
            if finding.message.startswith("validation check"):
                outcomes["lowered" if finding.fixed else finding.reason] += 1
    print(files, "files calling the helper")
    for outcome, count in outcomes.most_common():
        print(count, outcome)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not glob.glob(sys.argv[1] + "/models"):
        sys.exit("usage: python bench/validation_helper_sites.py PATH/TO/transformers (a package folder with models/)")
    main(sys.argv[1])
