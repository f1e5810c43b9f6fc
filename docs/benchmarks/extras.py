# Per run on PostgreSQL: the floor UPDATE's median, what each lease
# operation and the fenced write cost over their baselines in µs, and the
# ratio the targets judge. Usage: python3 extras.py DIR... (each DIR holds
# bench-postgres-N.json from `fence bench --json`).
import glob, json, sys

CASES = ("acquire", "renew", "release")
print("| run | floor µs | " + " | ".join(f"{c} +µs (ratio)" for c in CASES) + " | unfenced write µs | fenced write +µs (ratio) |")
print("|---|---|" + "---|" * len(CASES) + "---|---|")
for d in sys.argv[1:]:
    for f in sorted(glob.glob(f"{d}/bench-postgres-*.json")):
        c = {r["name"]: r for r in json.load(open(f)) if "ns_per_op" in r}
        fl = c["floor_update"]["ns_per_op"] / 1e3
        uw = c["unfenced_write"]["ns_per_op"] / 1e3
        cells = [f"+{c[n]['ns_per_op'] / 1e3 - fl:.0f} ({c[n]['ratio_to_baseline']:.2f})" for n in CASES]
        fw = c["fenced_write"]
        name = f.split("/benchmarks/")[-1]
        print(f"| {name} | {fl:.0f} | " + " | ".join(cells) + f" | {uw:.0f} | +{fw['ns_per_op'] / 1e3 - uw:.0f} ({fw['ratio_to_baseline']:.2f}) |")
