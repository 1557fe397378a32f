"""Markdown tables (and the target checks) from bench/results/*.json.

    python3 bench/tables.py [RESULTS_DIR]     prints the tables

bench/run.py writes them to RESULTS_DIR/tables.md after a run. Standard
library only.
"""

import json
import os
import sys

SERVERS = ('reverie', 'reverb')
NAMES = {'reverie': 'reverie', 'reverie-own': 'reverie, own transport', 'reverb': 'Reverb', 'echo': 'echo', 'echo-table': 'echo holding a table',
         'echo-h2-table': 'own-HTTP/2 echo holding a table'}
CLIENT_NAMES = {'go': '`reverie bench` (Go client)',
                'py': 'dm-reverb Python client (bench/reverb_client_driver.py)',
                'py-procs': 'dm-reverb Python client, one process per client (bench/reverb_client_driver.py --procs)'}
# How the targets table names each client.
CLIENT_TAGS = {'go': 'go', 'py': 'py', 'py-procs': 'py, a process each'}


def load(outdir, workload, best=True):
  """A results file; with best, only the best repetition of each run."""
  path = os.path.join(outdir, f'{workload}.json')
  if not os.path.exists(path):
    return None
  with open(path) as f:
    data = json.load(f)
  if best:
    data['runs'] = best_runs(data['runs'])
  return data


def throughput(rec):
  """What makes a repetition the best: most items/s; for the paced
  latency runs (same offered load), the lowest p99."""
  if rec.get('client') == 'paced':
    return -rec['sample']['p99_ms']
  return sum(rec[k]['items_per_sec'] for k in ('insert', 'sample') if k in rec)


def best_runs(runs):
  """Of the repetitions of a configuration, the one with most items/s."""
  best = {}
  for r in runs:
    key = tuple(str(r.get(k)) for k in ('server', 'client', 'payload_bytes', 'mode', 'clients',
                                         'bench_flags', 'rate_basis', 'phase'))
    if key not in best or throughput(r) > throughput(best[key]):
      best[key] = r
  return list(best.values())


def kind_of(rec):
  return 'insert' if 'insert' in rec else 'sample'


def find(runs, **want):
  """The first run whose fields (and kind: insert/sample) match."""
  kind = want.pop('kind', None)
  for r in runs:
    if kind and kind not in r:
      continue
    if all(r.get(k) == v for k, v in want.items()):
      return r
  return None


def fnum(x, digits=3):
  """A number with about `digits` significant digits and thousands commas."""
  if x is None:
    return '–'
  if x == 0:
    return '0'
  ax = abs(x)
  if ax >= 10 ** (digits - 1):
    return f'{x:,.0f}'
  dec = digits - 1 - int(f'{ax:e}'.split('e')[1])
  return f'{x:,.{max(dec, 0)}f}'


def fms(ms):
  if ms is None:
    return '–'
  if ms < 0.001:
    return f'{ms * 1e6:.0f} ns'
  if ms < 1:
    return f'{ms * 1e3:.3g} µs'
  if ms < 1000:
    return f'{ms:.3g} ms'
  return f'{ms / 1e3:.3g} s'


def ratio(a, b):
  if a is None or b is None or not b:
    return None
  return a / b


def fratio(r):
  return '–' if r is None else f'{r:.2f}×'


def stat(rec, key):
  st = (rec or {}).get('server_stats') or {}
  return st.get(key)


def fgc(rec):
  """reverie's collections in a run, and their CPU per million items:
  '1 (4.2)', '0', or '–' where not counted (Reverb, and results from
  before they were counted)."""
  n = stat(rec, 'gc_cycles')
  if n is None:
    return '–'
  if not n:
    return '0'
  return f"{n} ({fnum(stat(rec, 'gc_cpu_sec_per_m_items'))})"


def payload_name(p):
  return {400: '400 B', 4000: '4 kB', 40000: '40 kB', 400000: '400 kB'}.get(p, f'{p} B')


def section5_tables(data, client):
  runs = [r for r in data['runs'] if r['client'] == client]
  out = []
  payloads = sorted({r['payload_bytes'] for r in runs})
  for payload in payloads:
    rows = []
    for mode in ('insert', 'sample'):
      counts = sorted({r['clients'] for r in runs
                       if r['payload_bytes'] == payload and r['mode'] == mode})
      for n in counts:
        v = find(runs, server='reverie', payload_bytes=payload, mode=mode, clients=n)
        b = find(runs, server='reverb', payload_bytes=payload, mode=mode, clients=n)
        kv = (v or {}).get(mode) or {}
        kb = (b or {}).get(mode) or {}
        rows.append('| {} | {} | {} | {} | **{}** | {} | {} | {} / {} | {} / {} | {} | {} | **{}** | {} | {} | {} |'.format(
            mode, n, fnum(kv.get('items_per_sec')), fnum(kb.get('items_per_sec')),
            fratio(ratio(kv.get('items_per_sec'), kb.get('items_per_sec'))),
            fnum(kv.get('mb_per_sec')), fnum(kb.get('mb_per_sec')),
            fms(kv.get('p50_ms')), fms(kv.get('p99_ms')),
            fms(kb.get('p50_ms')), fms(kb.get('p99_ms')),
            fnum(stat(v, 'cpu_sec_per_m_items')), fnum(stat(b, 'cpu_sec_per_m_items')),
            fratio(ratio(stat(v, 'cpu_sec_per_m_items'), stat(b, 'cpu_sec_per_m_items'))),
            fgc(v), fnum(stat(v, 'peak_rss_mb')), fnum(stat(b, 'peak_rss_mb'))))
    if not rows:
      continue
    out.append(f'#### {payload_name(payload)}, {CLIENT_NAMES[client]}\n')
    out.append('| mode | clients | reverie items/s | Reverb items/s | ratio | reverie MB/s | Reverb MB/s '
               '| reverie p50 / p99 | Reverb p50 / p99 | reverie CPU s/M items | Reverb CPU s/M items '
               '| CPU ratio | reverie collections (GC CPU s/M items) | reverie peak RSS MB | Reverb peak RSS MB |')
    out.append('|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|')
    out.extend(rows)
    out.append('')
  return out


def batched_table(data):
  runs = data['runs']
  out = ['| mode | `reverie bench` flags | clients | reverie items/s | Reverb items/s | ratio | reverie p50 / p99 '
         '| Reverb p50 / p99 | reverie CPU s/M items | Reverb CPU s/M items | CPU ratio '
         '| reverie collections (GC CPU s/M items) |',
         '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
  for mode in ('insert', 'sample'):
    for n in sorted({r['clients'] for r in runs if r['mode'] == mode}):
      v = find(runs, server='reverie', mode=mode, clients=n)
      b = find(runs, server='reverb', mode=mode, clients=n)
      kv, kb = (v or {}).get(mode) or {}, (b or {}).get(mode) or {}
      out.append(f"| {mode} | `{(v or b)['bench_flags']}` | {n} | {fnum(kv.get('items_per_sec'))} | {fnum(kb.get('items_per_sec'))} "
                 f"| **{fratio(ratio(kv.get('items_per_sec'), kb.get('items_per_sec')))}** "
                 f"| {fms(kv.get('p50_ms'))} / {fms(kv.get('p99_ms'))} | {fms(kb.get('p50_ms'))} / {fms(kb.get('p99_ms'))} "
                 f"| {fnum(stat(v, 'cpu_sec_per_m_items'))} | {fnum(stat(b, 'cpu_sec_per_m_items'))} "
                 f"| **{fratio(ratio(stat(v, 'cpu_sec_per_m_items'), stat(b, 'cpu_sec_per_m_items')))}** "
                 f"| {fgc(v)} |")
  out.append('')
  return out


def paced_table(data):
  runs = [r for r in data['runs'] if r['client'] == 'paced']
  if not runs:
    return []
  out = ['| payload | offered load | server | offered items/s | got items/s | p50 | p99 | p999 | late requests '
         '| client timer late p50 / p99 | server CPU s/M items | collections (GC CPU s/M items) |',
         '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
  for r in sorted(runs, key=lambda r: (r['payload_bytes'], r['rate_basis'], r['server'])):
    sat = r['saturation_items_per_sec']
    if r['rate_basis'] == 'own':
      basis = f"half its own saturation ({fnum(sat[r['server']])}/s)"
    else:
      basis = 'half the lower saturation (' + ', '.join(f'{NAMES[k]} {fnum(v)}/s' for k, v in sorted(sat.items())) + ')'
    s = r['sample']
    # How late the paced client's timer woke it before its requests, which
    # bench/paced leaves out of their latency; "–" in older results.
    wake = fms(None)
    if 'client_wake_late_p99_ms' in r:
      wake = f"{fms(r['client_wake_late_p50_ms'])} / {fms(r['client_wake_late_p99_ms'])}"
    out.append(f"| {payload_name(r['payload_bytes'])} | {basis} | {NAMES[r['server']]} "
               f"| {fnum(r['offered_items_per_sec'])} | {fnum(s['items_per_sec'])} | {fms(s['p50_ms'])} "
               f"| **{fms(s['p99_ms'])}** | {fms(s['p999_ms'])} | {r['late_requests']} | {wake} "
               f"| {fnum(stat(r, 'cpu_sec_per_m_items'))} | {fgc(r)} |")
  out.append('')
  return out


def queue_table(data):
  out = ['| client | clients (producers + consumers) | server | produced items/s | consumed items/s | consumed MB/s '
         '| insert p50 / p99 | sample p50 / p99 | server CPU s/M items | collections (GC CPU s/M items) | peak RSS MB |',
         '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|']
  runs = sorted(data['runs'], key=lambda r: (r['client'], r['clients'], r['server'] != 'reverie'))
  for r in runs:
    i, s = r.get('insert', {}), r.get('sample', {})
    out.append(f"| {r['client']} | {r['clients']} ({i.get('clients')} + {s.get('clients')}) | {NAMES[r['server']]} "
               f"| {fnum(i.get('items_per_sec'))} | {fnum(s.get('items_per_sec'))} | {fnum(s.get('mb_per_sec'))} "
               f"| {fms(i.get('p50_ms'))} / {fms(i.get('p99_ms'))} | {fms(s.get('p50_ms'))} / {fms(s.get('p99_ms'))} "
               f"| {fnum(stat(r, 'cpu_sec_per_m_items'))} | {fgc(r)} | {fnum(stat(r, 'peak_rss_mb'))} |")
  out.append('')
  ratios = []
  for client in ('go', 'py'):
    for n in sorted({r['clients'] for r in data['runs'] if r['client'] == client}):
      v = find(data['runs'], server='reverie', client=client, clients=n)
      b = find(data['runs'], server='reverb', client=client, clients=n)
      if v and b:
        ratios.append(f"{client} ×{n}: {fratio(ratio(v['sample']['items_per_sec'], b['sample']['items_per_sec']))}")
  if ratios:
    out.append('reverie / Reverb consumed items/s: ' + '; '.join(ratios) + '.')
    out.append('')
  return out


def prio_table(data):
  out = ['| phase | server | items | items/s | MB/s | p50 | p99 | update p50 / p99 | server CPU s/M items '
         '| collections (GC CPU s/M items) | peak RSS MB | table size after |',
         '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|']
  for phase in ('insert', 'sample'):
    for srv in SERVERS:
      r = find(data['runs'], server=srv, phase=phase)
      if not r:
        continue
      k = r[phase]
      upd = (f"{fms(k.get('update_p50_ms'))} / {fms(k.get('update_p99_ms'))}" if phase == 'sample' else '')
      out.append(f"| {phase} | {NAMES[srv]} | {fnum(k['items'])} | {fnum(k['items_per_sec'])} | {fnum(k['mb_per_sec'])} "
                 f"| {fms(k['p50_ms'])} | {fms(k['p99_ms'])} | {upd} | {fnum(stat(r, 'cpu_sec_per_m_items'))} "
                 f"| {fgc(r)} | {fnum(stat(r, 'peak_rss_mb'))} | {fnum(r.get('table_size'))} |")
  out.append('')
  rs = []
  for phase in ('insert', 'sample'):
    v = find(data['runs'], server='reverie', phase=phase)
    b = find(data['runs'], server='reverb', phase=phase)
    if v and b:
      rs.append(f"{phase} items/s {fratio(ratio(v[phase]['items_per_sec'], b[phase]['items_per_sec']))}, "
                f"CPU s/M items {fratio(ratio(stat(v, 'cpu_sec_per_m_items'), stat(b, 'cpu_sec_per_m_items')))}")
  if rs:
    out.append('reverie / Reverb: ' + '; '.join(rs) + '.')
    out.append('')
  return out


def echo_table(echo, s5):
  runs = [r for r in echo['runs'] if r['server'] == 'echo']
  s5runs = [r for r in (s5 or {}).get('runs', []) if r['client'] == 'go']
  out = ['| payload | mode | clients | echo items/s | echo MB/s | echo CPU s/M items | reverie MB/s | reverie / echo | Reverb MB/s | Reverb / echo |',
         '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|']
  for r in sorted(runs, key=lambda r: (r['payload_bytes'], r['mode'], r['clients'])):
    k = r[r['mode']]
    v = find(s5runs, server='reverie', payload_bytes=r['payload_bytes'], mode=r['mode'], clients=r['clients'])
    b = find(s5runs, server='reverb', payload_bytes=r['payload_bytes'], mode=r['mode'], clients=r['clients'])
    vm = v[r['mode']]['mb_per_sec'] if v else None
    bm = b[r['mode']]['mb_per_sec'] if b else None
    pct = lambda x: '–' if x is None else f'{100 * x:.0f}%'
    out.append(f"| {payload_name(r['payload_bytes'])} | {r['mode']} | {r['clients']} | {fnum(k['items_per_sec'])} "
               f"| {fnum(k['mb_per_sec'])} | {fnum(stat(r, 'cpu_sec_per_m_items'))} | {fnum(vm)} | {pct(ratio(vm, k['mb_per_sec']))} "
               f"| {fnum(bm)} | {pct(ratio(bm, k['mb_per_sec']))} |")
  out.append('')
  return out


def echo_floor_table(echo, s5, kind='echo-table'):
  """The echo holding a table's worth of payloads (server 'echo-table',
  or 'echo-h2-table' on its own HTTP/2 server) against both servers, by
  server CPU per item: the least a server on that transport that stores
  and serves that much memory spends."""
  runs = [r for r in echo['runs'] if r['server'] == kind]
  if not runs:
    return []
  s5runs = [r for r in (s5 or {}).get('runs', []) if r['client'] == 'go']
  out = ['| payload | mode | clients | echo items/s | echo CPU s/M items | reverie CPU s/M items | reverie / echo | '
         'Reverb CPU s/M items | Reverb / echo | echo / Reverb |',
         '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|']
  for r in sorted(runs, key=lambda r: (r['payload_bytes'], r['mode'], r['clients'])):
    e = stat(r, 'cpu_sec_per_m_items')
    v = stat(find(s5runs, server='reverie', payload_bytes=r['payload_bytes'], mode=r['mode'], clients=r['clients']),
             'cpu_sec_per_m_items')
    b = stat(find(s5runs, server='reverb', payload_bytes=r['payload_bytes'], mode=r['mode'], clients=r['clients']),
             'cpu_sec_per_m_items')
    out.append(f"| {payload_name(r['payload_bytes'])} | {r['mode']} | {r['clients']} | {fnum(r[r['mode']]['items_per_sec'])} "
               f"| {fnum(e)} | {fnum(v)} | {fratio(ratio(v, e))} | {fnum(b)} | {fratio(ratio(b, e))} | {fratio(ratio(e, b))} |")
  if kind == 'echo-h2-table':
    return out + ['',
                  'As above, but answering from an HTTP/2 server of the echo\'s own (bench/echo/h2.go) instead of',
                  'gRPC-Go\'s, to the same gRPC-Go client, with each stream\'s messages answered on a goroutine of',
                  'its own: the floor of a transport of reverie\'s own (docs/transport-plan.md).', '']
  out += ['',
          "The echo here holds as many payloads as the section-5 table of that size (`echo serve --rings`):",
          'it copies each inserted payload into the next slot of that memory, as a full table replaces its',
          'oldest item, and answers each sample request with payloads picked from it at random, so its bytes',
          "come from and go to memory mostly outside the CPU's caches, as a replay server's must. It has no",
          'table, index, encoding or compression. The last column is how far under Reverb a server that',
          'cost only this could get; reverie / echo is what reverie spends beyond it.',
          '']
  return out


def targets(outdir):
  """The issue's targets, each with the measured figures and met / not met."""
  s5 = load(outdir, 'section5')
  echo = load(outdir, 'echo')
  rows = []

  def add(name, value, want, ok, own='–', bound='–', floor='–', h2floor='–'):
    rows.append(f'| {name} | {value} | {want} | {"**met**" if ok else "not met" if ok is not None else "–"} '
                f'| {own} | {bound} | {floor} | {h2floor} |')

  def own_vs(runs, payload, mode, field, reverb_value):
    """reverie on its own transport (`--transport own`) against Reverb."""
    o = find(runs, server='reverie-own', payload_bytes=payload, mode=mode, clients=8)
    if not o:
      return '–'
    v = o[mode]['items_per_sec'] if field == 'items' else stat(o, 'cpu_sec_per_m_items')
    return f'{fnum(v)}: {fratio(ratio(v, reverb_value))}'

  def echo_vs(payload, mode, field, reverb_value, kind='echo'):
    """The echo's figure (kind: bare 'echo', 'echo-table' or 'echo-h2-table') for
    the same payload, mode and 8 clients, against Reverb's: how far a
    server that cost what the echo costs would get."""
    e = echo and find(echo['runs'], server=kind, payload_bytes=payload, mode=mode, clients=8)
    if not e:
      return '–'
    v = e[mode]['items_per_sec'] if field == 'items' else stat(e, 'cpu_sec_per_m_items')
    return f'{fnum(v)}: {fratio(ratio(v, reverb_value))}'

  if s5:
    for client in ('go', 'py', 'py-procs'):
      runs = [r for r in s5['runs'] if r['client'] == client]
      for payload in (400, 40000):
        for mode in ('insert', 'sample'):
          v = find(runs, server='reverie', payload_bytes=payload, mode=mode, clients=8)
          b = find(runs, server='reverb', payload_bytes=payload, mode=mode, clients=8)
          if not (v and b):
            continue
          r = ratio(v[mode]['items_per_sec'], b[mode]['items_per_sec'])
          add(f'{mode} items/s, {payload_name(payload)}, 8 clients ({CLIENT_TAGS[client]})',
              f"{fnum(v[mode]['items_per_sec'])} vs {fnum(b[mode]['items_per_sec'])}: {fratio(r)}",
              '≥ 2×', r >= 2,
              *((own_vs(runs, payload, mode, 'items', b[mode]['items_per_sec']),
                 echo_vs(payload, mode, 'items', b[mode]['items_per_sec']),
                 echo_vs(payload, mode, 'items', b[mode]['items_per_sec'], 'echo-table'),
                 echo_vs(payload, mode, 'items', b[mode]['items_per_sec'], 'echo-h2-table')) if client == 'go' else ()))
          c = ratio(stat(v, 'cpu_sec_per_m_items'), stat(b, 'cpu_sec_per_m_items'))
          add(f'server CPU s/M items, {mode} {payload_name(payload)}, 8 clients ({CLIENT_TAGS[client]})',
              f"{fnum(stat(v, 'cpu_sec_per_m_items'))} vs {fnum(stat(b, 'cpu_sec_per_m_items'))}: {fratio(c)}",
              '≤ 0.5×', None if c is None else c <= 0.5,
              *((own_vs(runs, payload, mode, 'cpu', stat(b, 'cpu_sec_per_m_items')),
                 echo_vs(payload, mode, 'cpu', stat(b, 'cpu_sec_per_m_items')),
                 echo_vs(payload, mode, 'cpu', stat(b, 'cpu_sec_per_m_items'), 'echo-table'),
                 echo_vs(payload, mode, 'cpu', stat(b, 'cpu_sec_per_m_items'), 'echo-h2-table')) if client == 'go' else ()))
    # The p99 checks compare the two servers within each repetition (run
    # back to back) and are met only if reverie's is no higher in every
    # one: the lowest of each server's repetitions, taken apart, would
    # favour whichever server's tail varies more.
    paced = [r for r in load(outdir, 'section5', best=False)['runs'] if r['client'] == 'paced']
    for payload in sorted({r['payload_bytes'] for r in paced}):
      for basis, label in (('own', 'each at half its own saturation'),
                           ('common', 'both at half the lower saturation')):
        pairs = []
        for rep in sorted({r.get('rep') for r in paced}, key=lambda x: x or 0):
          v = find(paced, server='reverie', payload_bytes=payload, rate_basis=basis, rep=rep)
          b = find(paced, server='reverb', payload_bytes=payload, rate_basis=basis, rep=rep)
          if v and b:
            pairs.append((v['sample']['p99_ms'], b['sample']['p99_ms']))
        if pairs:
          add(f'sample p99, {payload_name(payload)}, {label}',
              '; '.join(f'{fms(vp)} vs {fms(bp)}' for vp, bp in pairs),
              'reverie ≤ Reverb in every repetition', all(vp <= bp for vp, bp in pairs))
    batched = load(outdir, 'batched')
    go = [r for r in s5['runs'] + (batched['runs'] if batched else [])
          if r['client'] == 'go' and r['payload_bytes'] == 400]
    for mode, want in (('insert', 60000), ('sample', 600000)):
      best = {}
      for srv in SERVERS:
        rs = [r for r in go if r.get('mode') == mode and r['server'] == srv]
        if rs:
          best[srv] = max(rs, key=lambda r: r[mode]['items_per_sec'])
      if 'reverie' in best:
        v = best['reverie']
        how = f"{v['clients']} clients" + (f", {v['bench_flags']}" if v.get('bench_flags') else '')
        b = best.get('reverb')
        add(f'reverie {mode} items/s at 400 B, best run ({how})',
            fnum(v[mode]['items_per_sec']) + (f" (Reverb's best: {fnum(b[mode]['items_per_sec'])})" if b else ''),
            f'≥ {want:,}', v[mode]['items_per_sec'] >= want)
  if s5 and echo:
    go = [r for r in s5['runs'] if r['client'] == 'go' and r['server'] == 'reverie']
    for mode in ('insert', 'sample'):
      for n in (8, 'best'):
        es = [r for r in echo['runs'] if r['server'] == 'echo' and r['payload_bytes'] == 400000 and r['mode'] == mode]
        vs = [r for r in go if r['payload_bytes'] == 400000 and r.get('mode') == mode]
        if n != 'best':
          es = [r for r in es if r['clients'] == n]
          vs = [r for r in vs if r['clients'] == n]
        if not (es and vs):
          continue
        e = max(r[mode]['mb_per_sec'] for r in es)
        v = max(r[mode]['mb_per_sec'] for r in vs)
        add(f'400 kB {mode} MB/s vs bare gRPC echo ({n} clients)',
            f'{fnum(v)} vs {fnum(e)}: {100 * v / e:.0f}%', '≥ 70%', v >= 0.7 * e)
  if not rows:
    return []
  return ['| target | reverie vs Reverb (or vs target) | want | | reverie on its own transport vs Reverb '
          '| bare gRPC-Go echo vs Reverb | echo holding a table vs Reverb '
          '| own-HTTP/2 echo holding a table vs Reverb |',
          '|---|---|---|---|---|---|---|---|'] + rows + [
          '',
          'reverie is measured on its default transport, gRPC-Go\'s. The fifth column is the same reverie',
          'binary serving on its own HTTP/2 transport (`reverie serve --transport own`, server/h2grpc; Go',
          'client; 400 B and 40 kB), run through the same sweep in the same rotation.',
          '',
          'The last three columns are bench/echo in the same run (Go client; same payload, mode and clients):',
          'a server with no table and no encoding that moves the same bytes, against Reverb. The',
          'bare echo shows what gRPC-Go\'s transport costs on this machine, not a strict bound: it',
          'acknowledges every insert and answers sample requests one at a time, where a replay server',
          'confirms items in batches and streams samples ahead of requests, so reverie can pass it (see',
          'the echo table). The echo holding a table keeps as many payloads in memory as the table, as a',
          'replay server must, and moves them from and to that memory (see its table). The own-HTTP/2',
          'echo does the same from an HTTP/2 server of its own instead of gRPC-Go\'s, with a goroutine',
          'per stream (`echo serve --h2 --handoff`, 40 kB and 8 clients only): the floor of a transport of',
          'reverie\'s own that still speaks gRPC (docs/transport-plan.md).',
          '']


def single_runs(outdir):
  """Which kinds of run were made once per server rather than repeated,
  as a phrase (or '')."""
  counts = {}
  for w in ('section5', 'batched', 'queue', 'prioritized', 'echo'):
    d = load(outdir, w, best=False)
    for r in (d or {}).get('runs', []):
      key = (w, r['client'], r.get('phase')) + tuple(
          str(r.get(k)) for k in ('server', 'payload_bytes', 'mode', 'clients', 'bench_flags', 'rate_basis'))
      counts[key] = counts.get(key, 0) + 1
  kinds = {}
  for key, n in counts.items():
    kinds.setdefault(key[:3], set()).add(n)
  py, names = [], []
  for (w, client, phase), ns in sorted(kinds.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
    if ns != {1}:
      continue
    if client == 'py':
      py.append('section 5' if w == 'section5' else w)
    elif phase:
      names.append(f"{w}'s {phase} phase")
    else:
      names.append(f'the {client} runs of {w}')
  if py:
    names.insert(0, f"the dm-reverb client's threaded runs ({' and '.join(py)})")
  if len(names) > 1:
    return ', '.join(names[:-1]) + ' and ' + names[-1]
  return ''.join(names)


def gc_summary(outdir):
  """A sentence on reverie's collections over the runs that counted them
  (every run against reverie's default server, from the results of
  2026-11-27 11:50 on), or ''."""
  runs = withgc = cycles = 0
  gc_cpu = cpu = 0.0
  for w in ('section5', 'batched', 'queue', 'prioritized'):
    d = load(outdir, w, best=False)
    for r in (d or {}).get('runs', []):
      st = r.get('server_stats') or {}
      if r['server'] != 'reverie' or st.get('gc_cycles') is None:
        continue
      runs += 1
      withgc += st['gc_cycles'] > 0
      cycles += st['gc_cycles']
      gc_cpu += st['gc_cpu_sec']
      cpu += st['cpu_sec']
  if not runs:
    return ''
  return (f"reverie's garbage collector (from its /metrics, read between runs): {withgc} of reverie's "
          f"{runs} runs that counted them saw "
          f"{cycles} collections end in all, which took {100 * gc_cpu / cpu:.0f}% of its server CPU over "
          f"those runs ({gc_cpu:.1f} of {cpu:.1f} s, the Go runtime's estimate). The tables give each "
          f"run's collections and their CPU per million items beside its CPU.")


def render(outdir):
  out = []
  s5 = load(outdir, 'section5')
  meta = None
  for w in ('section5', 'batched', 'queue', 'prioritized', 'echo'):
    d = load(outdir, w)
    if d:
      meta = d['meta']
  if meta:
    reps = meta['profile_params'].get('reps', 1)
    m = meta['machine']
    out.append(f"Measured {meta['date']} with `{meta['command']}` (profile {meta['profile']}, "
               f"{meta['elapsed_sec']:.0f} s) at commit {meta['reverie_commit']}, on {m['cpus']} CPUs "
               f"({m['cpu']}), {m['mem_gib']} GiB.")
    for kind, infos in meta['servers'].items():
      if kind in SERVERS and infos:
        out.append(f"{NAMES[kind]}: up in {infos[0]['startup_sec']} s, idle RSS {infos[0]['idle_rss_mb']} MB.")
    outside = []
    for kind, infos in meta['servers'].items():
      done = [i for i in infos if 'serving_cpu_sec' in i]
      if kind in NAMES and done:
        life = sum(i['serving_cpu_sec'] for i in done)
        off = sum(i['outside_windows_cpu_sec'] for i in done)
        outside.append(f"{NAMES[kind]} {off:.1f} s of {life:.1f} s ({100 * off / life if life else 0:.1f}%)")
    if outside:
      out.append('Server CPU outside every run\'s window (between runs: collections ending after a run, '
                 'the scavenger, idle threads; the harness\'s metrics reads of reverie; the dm-reverb '
                 'driver\'s set-up), which the per-run figures do not count, summed over the server '
                 'processes from serving to stop: ' + '; '.join(outside) + '.')
    if reps > 1:
      once = single_runs(outdir)
      out.append(f'Every configuration ran {reps} times against each server (and bench/echo)'
                 + (f", except {once}, which ran once" if once else '')
                 + ', the servers in rotating order; the tables show the repetition with the most items/s '
                 '(the paced latency runs: the lowest p99; the Targets table\'s p99 checks compare the two '
                 'servers within each repetition instead). All repetitions are in the JSON.')
    out.append('')
  shares = {'other_cpu_share': [], 'steal_cpu_share': []}
  for w in ('section5', 'batched', 'queue', 'prioritized', 'echo'):
    d = load(outdir, w, best=False)
    for r in (d or {}).get('runs', []):
      for k, vals in shares.items():
        v = (r.get('server_stats') or {}).get(k)
        if v is not None:
          vals.append(v)

  def spread(vals):
    vals = sorted(vals)
    return (f'{100 * vals[len(vals) // 2]:.0f}% at the median, '
            f'{100 * vals[int(0.9 * (len(vals) - 1))]:.0f}% at the 90th percentile and '
            f'{100 * vals[-1]:.0f}% at most')

  if shares['other_cpu_share']:
    line = (f"Noise: the share of the machine's CPU used by processes other than the server and the client "
            f"during a run (from /proc/stat) was {spread(shares['other_cpu_share'])}, over "
            f"{len(shares['other_cpu_share'])} runs.")
    if shares['steal_cpu_share']:
      line += (f" Time the hypervisor gave to other guests (steal, from /proc/stat) was {spread(shares['steal_cpu_share'])}.")
    out.append(line)
    out.append('')
  gc = gc_summary(outdir)
  if gc:
    out.append(gc)
    out.append('')
  t = targets(outdir)
  if t:
    out.append('### Targets\n')
    out.extend(t)
  if s5:
    out.append('### Reverb paper, section 5: insert-only and sample-only\n')
    for client in ('go', 'py', 'py-procs'):
      out.extend(section5_tables(s5, client))
    p = paced_table(s5)
    if p:
      out.append('### Sample latency at half saturation (bench/paced: 8 clients, requests of 16 samples)\n')
      out.extend(p)
  bt = load(outdir, 'batched')
  if bt:
    out.append('### 400 B with deeper pipelines (batched streams)\n')
    out.extend(batched_table(bt))
  q = load(outdir, 'queue')
  if q:
    out.append('### Queue transport: 40 kB items, producers and consumers at once\n')
    out.extend(queue_table(q))
  pr = load(outdir, 'prioritized')
  if pr:
    out.append('### Prioritized replay: Acme-shaped transitions, batch 256, priority updates after every batch\n')
    out.extend(prio_table(pr))
  e = load(outdir, 'echo')
  if e:
    out.append('### Bare gRPC streaming echo: the ceiling (bench/echo)\n')
    out.extend(echo_table(e, s5))
    f = echo_floor_table(e, s5)
    if f:
      out.append('### gRPC streaming echo holding a table (bench/echo --rings)\n')
      out.extend(f)
    f = echo_floor_table(e, s5, 'echo-h2-table')
    if f:
      out.append('### The same echo on an HTTP/2 server of its own (bench/echo --rings --h2 --handoff)\n')
      out.extend(f)
  return '\n'.join(out) + '\n'


if __name__ == '__main__':
  d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')
  sys.stdout.write(render(d))
