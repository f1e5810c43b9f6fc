# Markdown tables of peers-<db>.json: per operation, and contended (the
# median over the rounds, and each round's ratio to fence).
import json,os,sys
d=sys.argv[1] if len(sys.argv)>1 else '.'
for db in ('postgres','mysql','sqlite'):
    if not os.path.exists(f'{d}/peers-{db}.json'):
        continue
    rows=json.load(open(f'{d}/peers-{db}.json'))
    print(f'#### {db}\n')
    per={}
    for r in rows:
        if r['name'] in ('acquire_release','renew','refused'):
            per.setdefault(r['peer'],{})[r['name']]=r
    print('| peer | durable | acquire+release | renew | refused |\n|---|---|---|---|---|')
    for p,v in per.items():
        cells=[]
        for n in ('acquire_release','renew','refused'):
            r=v.get(n)
            if not r or not r['ns_per_op']: cells.append('not run'); continue
            cells.append(f"{r['ns_per_op']/1000:.0f} µs ({r['ratio_to_fence']:.2f}× fence)")
        print(f"| {p} | {'yes' if list(v.values())[0]['durable'] else 'no'} | "+' | '.join(cells)+' |')
    print('\n| peer | leases | acquisitions/s (median of rounds) | ÷ fence, median | ÷ fence, each round | refusal p99 |\n|---|---|---|---|---|---|')
    for r in sorted([r for r in rows if r['name']=='contended' and r.get('acquisitions_per_s')], key=lambda r:(r['leases'],-r['acquisitions_per_s'])):
        each=' '.join(f'{x:.2f}' for x in r.get('throughput_to_fence_runs',[]))
        print(f"| {r['peer']} | {r['leases']} | {r['acquisitions_per_s']:.0f} | {r['throughput_to_fence']:.2f} | {each} | {r.get('refusal_p99_ns',0)/1e6:.1f} ms |")
    la=[r for r in rows if r['name']=='load_average']
    if la and la[0].get('metrics'): print('\nload average:', la[0]['metrics'])
    print()
