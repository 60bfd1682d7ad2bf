"""Differential check of corral's BPF compiler against libseccomp, long version:
the shipped profile and many random profiles, compiled by both and run in one
classic-BPF interpreter on the same random inputs; any verdict that differs is
printed and the exit code is 1.

    python scripts/diff_seccomp.py [--seconds 60] [--seed N]

tests/test_seccomp_libseccomp.py runs a short, fixed-seed version.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corral.seccomp.arches import ARCHES
from corral.seccomp.profile import load_profile
from tests.helpers import seccomp_diff


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}", flush=True)
    shipped, profiles, inputs, failures, lib_only, hung = load_profile(), 0, 0, 0, 0, 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        arch = rng.choice(ARCHES)
        # every tenth round the shipped profile, the rest random ones
        if profiles % 10 == 0:
            profile, label = shipped, "shipped"
        else:
            profile, label = seccomp_diff.random_profile(rng, arch, rng.randint(5, 120)), "random"
        try:
            tried, differ = seccomp_diff.differences(profile, arch, rng, 5000)
        except seccomp_diff.LibseccompHung:
            hung += 1
            continue
        profiles += 1
        inputs += tried
        for diff in differ:
            # corral wrong, or any difference on the shipped profile, is a failure;
            # elsewhere libseccomp's own lost rules (see seccomp_diff) are counted
            if diff.corral_wrong or profile is shipped:
                failures += 1
                print(f"DIFFER {label} {arch}: {diff}")
            else:
                lib_only += 1
    print(f"{profiles} profiles, {inputs} inputs, {failures} failures; "
          f"{lib_only} verdicts where libseccomp alone strayed from the profile's semantics; "
          f"{hung} profiles libseccomp did not finish building")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
