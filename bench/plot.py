"""Plots of bench/results: throughput against clients, one line per server.

    .bin/venv-bench/bin/python bench/plot.py RESULTS_DIR PLOT_DIR

Like figures 5 (inserts) and 6 (samples) of the Reverb paper: one panel per
payload size, items per second against concurrent clients, for reverie and
Reverb under the same client (solid: `reverie bench`, the Go client;
dashed: the dm-reverb Python client), with the bare gRPC echo of the same
bytes (grey), the issue's ceiling (a reference rather than a bound: see
the note under the targets table), and where it ran, the echo holding a
table's worth of payloads in memory (dark grey, dash-dot). Of repeated runs, the best (as in
bench/results/tables.md). Writes PLOT_DIR/bench-insert.png and
PLOT_DIR/bench-sample.png.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import matplotlib  # pylint: disable=g-import-not-at-top
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import ticker  # pylint: disable=g-import-not-at-top
import tables  # pylint: disable=g-import-not-at-top

STYLE = {
    ('reverie', 'go'): dict(color='tab:blue', ls='-', marker='o', label='reverie, Go client'),
    ('reverb', 'go'): dict(color='tab:red', ls='-', marker='s', label='Reverb, Go client'),
    ('reverie', 'py'): dict(color='tab:blue', ls='--', marker='o', mfc='none', label='reverie, dm-reverb client'),
    ('reverb', 'py'): dict(color='tab:red', ls='--', marker='s', mfc='none', label='Reverb, dm-reverb client'),
    ('echo', 'go'): dict(color='0.55', ls=':', marker='.', label='bare gRPC-Go echo'),
    ('echo-table', 'go'): dict(color='0.3', ls='-.', marker='x', label='gRPC-Go echo holding a table'),
    ('echo-h2-table', 'go'): dict(color='tab:green', ls='none', marker='D', label='own-HTTP/2 echo holding a table'),
    ('reverie-own', 'go'): dict(color='tab:cyan', ls='-', marker='*', ms=10, label='reverie on its own transport, Go client'),
}
PAYLOAD = {400: '400 B', 4000: '4 kB', 40000: '40 kB', 400000: '400 kB'}


def human(y, _=None):
  """1.5k, 20k, 1.2M: tick labels."""
  for div, suffix in ((1e6, 'M'), (1e3, 'k')):
    if abs(y) >= div:
      return f'{y / div:g}{suffix}'
  return f'{y:g}'


def load(d, w):
  p = os.path.join(d, f'{w}.json')
  if not os.path.exists(p):
    return []
  with open(p) as f:
    return json.load(f)['runs']


def main(argv):
  results, plots = argv[1], argv[2]
  # The best repetition of each configuration, as in the tables.
  runs = [r for r in tables.best_runs(load(results, 'section5')) if r['client'] in ('go', 'py')]
  runs += tables.best_runs(load(results, 'echo'))
  if not runs:
    print('plot.py: no section5 results', file=sys.stderr)
    return 1
  os.makedirs(plots, exist_ok=True)
  payloads = sorted({r['payload_bytes'] for r in runs if not r['server'].startswith('echo')})
  for fig_no, mode in ((5, 'insert'), (6, 'sample')):
    ncol = 2 if len(payloads) > 1 else 1
    nrow = (len(payloads) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6 * ncol, 4.2 * nrow), squeeze=False)
    for ax, payload in zip(axes.flat, payloads):
      for (server, client), style in STYLE.items():
        pts = sorted((r['clients'], r[mode]['items_per_sec']) for r in runs
                     if r['server'] == server and r['client'] == client
                     and r['payload_bytes'] == payload and r.get('mode') == mode and mode in r)
        if pts:
          ax.plot([p[0] for p in pts], [p[1] for p in pts], **style)
      ax.set_xscale('log', base=2)
      ax.set_ylim(bottom=0)
      ax.yaxis.set_major_formatter(ticker.FuncFormatter(human))
      xs = sorted({r['clients'] for r in runs if r['payload_bytes'] == payload})
      ax.set_xticks(xs)
      ax.set_xticklabels([str(x) for x in xs])
      ax.set_title(f'{PAYLOAD.get(payload, payload)} items, chunk length 1')
      ax.set_xlabel('concurrent clients')
      ax.set_ylabel(f'{mode}ed items / s' if mode == 'insert' else 'sampled items / s')
      ax.grid(True, which='both', alpha=0.3)
      # MB/s on the right axis: the same curve, scaled by the payload.
      sec = ax.secondary_yaxis('right', functions=(lambda y, p=payload: y * p / 1e6,
                                                   lambda m, p=payload: m * 1e6 / p))
      sec.set_ylabel('MB/s')
      sec.yaxis.set_major_formatter(ticker.FuncFormatter(human))
    for ax in list(axes.flat)[len(payloads):]:
      ax.axis('off')
    legend = {}  # label -> handle, every line of every panel once
    for ax in axes.flat:
      for h, label in zip(*ax.get_legend_handles_labels()):
        legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), loc='lower center', ncol=3, frameon=False)
    what = 'Insert-only' if mode == 'insert' else 'Sample-only'
    fig.suptitle(f'{what} throughput, reverie vs Reverb 0.14.0, same machine (2 cores), '
                 f'random float32 payloads (cf. Reverb paper fig. {fig_no})')
    # Room below the panels for the legend's rows.
    rows = (len(legend) + 2) // 3
    fig.tight_layout(rect=(0, (0.15 + 0.25 * rows) / fig.get_figheight(), 1, 0.96))
    out = os.path.join(plots, f'bench-{mode}.png')
    fig.savefig(out, dpi=90)
    plt.close(fig)
    print(f'plot.py: wrote {out}', file=sys.stderr)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
