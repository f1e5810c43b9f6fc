import json,glob,statistics,sys
out=sys.argv[1] if len(sys.argv)>1 else '.'
dbs=[('sqlite','SQLite'),('postgres','PostgreSQL 15'),('mysql','MariaDB 10.11')]
data={}
for db,_ in dbs:
    runs=[json.load(open(f)) for f in sorted(glob.glob(f'{out}/bench-{db}-*.json'))]
    data[db]={}
    for r in runs:
        for c in r:
            data[db].setdefault(c['name'],[]).append(c)
order=['acquire','renew','release','is_held','acquire_held','fenced_write','fenced_tx','fenced_tx_pgx','floor_update_wide','fenced_write_sql','tx_pk_read','tx_pgx_check_sql','takeover','pk_select']
print('| case (target) | '+' | '.join(n for _,n in dbs)+' |')
print('|---|'+'---|'*len(dbs))
for n in order:
    row=[]
    for db,_ in dbs:
        cs=data[db].get(n)
        if not cs: row.append('—'); continue
        rat=[c.get('ratio_to_baseline',0) for c in cs]
        m=statistics.median(rat)
        t=cs[0].get('target','')
        base=cs[0].get('baseline','')
        s='/'.join(f'{x:.2f}' for x in rat)+f' (median {m:.2f} × {base}'
        if t:
            met=[c.get('met') for c in cs]
            ok=sum(1 for x in met if x)
            s+=f'; {t}: '+('met' if statistics.median([1 if x else 0 for x in met])==1 else '**missed**')
        s+=')'
        row.append(s)
    print(f'| {n} | '+' | '.join(row)+' |')
print()
for db,name in dbs:
    bs=[]
    for n in ('floor_update','select_1','pk_select','unfenced_write','unfenced_tx','unfenced_tx_pgx'):
        cs=data[db].get(n)
        if cs: bs.append(f"{n} {round(statistics.median([c['ns_per_op'] for c in cs])/1000)}")
    print(f'{name}: '+', '.join(bs)+' µs')
