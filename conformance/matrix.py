"""Counts the results of the conformance legs and builds the feature matrix.

    python3 conformance/matrix.py --out MATRIX.md \\
        --leg 'a|dm-reverb client|Reverb... |pytest|LIST|LOG|RC' ...

Used by scripts/conformance.sh; standard library only. Each --leg is
`id|client|server|kind|list|log|rc` with kind `pytest` or `go`:

  list  every test the leg should run, one per line (`pytest --collect-only
        -q` output, or a Go test binary's `-test.list` output); empty if it
        could not be listed;
  log   the runner's verbose output (`pytest -v`, `go test -v`);
  rc    the runner's exit code.

A listed test passes only if the log reports it passed: failures, errors,
skips and tests the runner never reached (a crash, a timeout) all count as
failed. A leg whose runner failed without any failed test (or that could not
list its tests) counts one failure more, so a broken leg is never green.

Prints one line per leg, the matrix (rows: the feature groups below;
columns: the legs; cells: passed/failed with counts) and, last, alone on its
line: `conformance: N passed, M failed`. Exits 1 if anything failed.
"""

import argparse
import re
import sys

# (row title, pytest name prefixes, Go test names). Every test belongs to
# exactly one row; a test no row claims lands in "other".
GROUPS = [
    ('Client.insert / Client.Insert and sample info (probability, '
     'table_size, priority, times_sampled)',
     ['test_insert_sample_'],
     ['TestConformanceInsert', 'TestConformanceSamplePrioritized']),
    ('TrajectoryWriter: columns, items across chunks, overlapping items, '
     'squeeze, end_episode, flush timeout on a full queue',
     ['test_trajectory_writer_'],
     ['TestConformanceWriterLargeStep', 'TestConformanceWriterSqueeze',
      'TestConformanceWriterOverlappingItems',
      'TestConformanceWriterEndEpisode']),
    ('Legacy Writer (client.writer)', ['test_legacy_writer_'], []),
    ('TrajectoryDataset / TimestepDataset (rate_limiter_timeout_ms incl. 0: '
     'departure 1, max_in_flight_samples_per_worker)',
     ['test_dataset_'], []),
    ('mutate_priorities (updates, deletes, an invalid priority: '
     'departure 8)', ['test_mutate_priorities_'],
     ['TestConformanceMutatePriorities',
      'TestConformanceMutatePrioritiesInvalid']),
    ('reset', ['test_reset'], ['TestConformanceReset']),
    ('server_info (options, counters, flat and nested signatures)',
     ['test_server_info_'], ['TestConformanceServerInfo']),
    ('Queue and stack semantics, blocking and unblocking',
     ['test_queue_', 'test_stack_'],
     ['TestConformanceQueueBlockingAndFlushTimeout']),
    ('Rate limiters: SampleToInsertRatio both ways, sampler timeouts',
     ['test_rate_limiter_'], ['TestConformanceRateLimiterTimeout']),
    ('Structured writer (patterns, conditions, td_error)',
     ['test_structured_writer_'], []),
    ('Every dtype round-tripped', ['test_dtype_'],
     ['TestConformanceWriterDTypesAcrossChunks']),
    ('Errors: unknown table, sample timeout ending a dataset',
     ['test_error_'], ['TestConformanceUnknownTable']),
    ('Local unix socket of a server with TLS and tokens on TCP (departure '
     '30; reverie only)', ['test_local_socket_'], []),
]
OTHER = 'other'


class Leg:

  def __init__(self, spec):
    parts = spec.split('|')
    if len(parts) != 7:
      raise SystemExit(f'matrix.py: bad --leg {spec!r}')
    (self.id, self.client, self.server, self.kind, list_path, log_path,
     rc) = parts
    self.rc = int(rc)
    self.tests = self._read_list(list_path)
    self.outcomes = self._read_log(log_path)
    self.passed = [t for t in self.tests if self.outcomes.get(t) == 'PASS']
    self.failed = [t for t in self.tests if t not in self.passed]
    # A broken runner with no failed test to show for it counts once.
    self.broken = (self.rc != 0 and not self.failed) or not self.tests

  def _read_text(self, path):
    try:
      with open(path, errors='replace') as f:
        return f.read()
    except OSError:
      return ''

  def _read_list(self, path):
    names = []
    for line in self._read_text(path).splitlines():
      line = line.strip()
      if self.kind == 'pytest':
        if '::' in line and ' ' not in line:
          names.append(line.split('::', 1)[1])
      elif re.fullmatch(r'Test\w+', line):
        names.append(line)
    return names

  def _read_log(self, path):
    outcomes = {}
    for line in self._read_text(path).splitlines():
      if self.kind == 'pytest':
        m = re.match(r'\S+::(\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)',
                     line)
        if m:
          name, outcome = m.groups()
          # A test that passed and then errored in teardown is reported twice.
          if outcomes.get(name) in (None, 'PASS'):
            outcomes[name] = 'PASS' if outcome == 'PASSED' else outcome
      else:
        m = re.match(r'--- (PASS|FAIL|SKIP): (\S+)', line)
        if m:
          outcomes[m.group(2)] = m.group(1)
    return outcomes

  @property
  def title(self):
    return f'{self.client} × {self.server}'

  def n_failed(self):
    return len(self.failed) + (1 if self.broken else 0)


def group_of(kind, test):
  base = test.split('[', 1)[0]
  for title, prefixes, go_names in GROUPS:
    if kind == 'pytest' and any(base.startswith(p) for p in prefixes):
      return title
    if kind == 'go' and base in go_names:
      return title
  return OTHER


def cell(leg, title):
  tests = [t for t in leg.tests if group_of(leg.kind, t) == title]
  if not tests:
    return '—'
  failed = [t for t in tests if t in leg.failed]
  if not failed:
    return f'passed ({len(tests)}/{len(tests)})'
  return (f'**failed** ({len(failed)} of {len(tests)}: '
          f'{", ".join(failed)})')


def main(argv):
  parser = argparse.ArgumentParser()
  parser.add_argument('--leg', action='append', default=[])
  parser.add_argument('--out', help='also write the matrix here (markdown)')
  args = parser.parse_args(argv[1:])
  legs = [Leg(spec) for spec in args.leg]

  total_passed = sum(len(leg.passed) for leg in legs)
  total_failed = sum(leg.n_failed() for leg in legs)

  for leg in sorted(legs, key=lambda leg: leg.id):
    note = ''
    if leg.broken:
      note = (f' (runner exit code {leg.rc}'
              + (', no tests listed' if not leg.tests else '') + ')')
    print(f'leg ({leg.id}) {leg.title}: {len(leg.passed)} passed, '
          f'{leg.n_failed()} failed{note}')
    for t in leg.failed:
      print(f'    failed: {t} ({leg.outcomes.get(t, "not run")})')

  rows = [title for title, _, _ in GROUPS]
  if any(group_of(leg.kind, t) == OTHER for leg in legs for t in leg.tests):
    rows.append(OTHER)
  lines = ['| Feature | ' + ' | '.join(leg.title for leg in legs) + ' |',
           '|---|' + '---|' * len(legs)]
  for title in rows:
    lines.append(f'| {title} | ' +
                 ' | '.join(cell(leg, title) for leg in legs) + ' |')
  lines.append('| **Total** | ' + ' | '.join(
      f'{len(leg.passed)} passed, {leg.n_failed()} failed' for leg in legs) +
               ' |')
  matrix = '\n'.join(lines)
  print()
  print(matrix)
  print()
  if args.out:
    with open(args.out, 'w') as f:
      f.write(matrix + '\n')
  print(f'conformance: {total_passed} passed, {total_failed} failed',
        flush=True)
  return 1 if total_failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
