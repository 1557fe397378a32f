"""A server process's CPU time and peak memory, from /proc (Linux only).

Used by bench/run.py and bench/reverb_client_driver.py. Standard library
only.
"""

import os
import time
import urllib.request

_CLK_TCK = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid):
  """utime + stime of every thread of pid so far, in seconds."""
  with open(f'/proc/{pid}/stat') as f:
    stat = f.read()
  # The fields after "(comm)" start with field 3 (state); utime and stime
  # are fields 14 and 15.
  fields = stat[stat.rindex(')') + 2:].split()
  return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def status_kb(pid, key):
  """A kB field of /proc/PID/status (VmHWM, VmRSS, ...), or None."""
  with open(f'/proc/{pid}/status') as f:
    for line in f:
      if line.startswith(key + ':'):
        return int(line.split()[1])
  return None


def machine_seconds():
  """CPU seconds of all CPUs of the machine so far: (busy, steal).

  busy is everything but idle and iowait, steal included. steal is time
  the hypervisor gave to other guests while this one had work to run.
  """
  with open('/proc/stat') as f:
    vals = [int(v) for v in f.readline().split()[1:]]
  # user nice system idle iowait irq softirq steal guest guest_nice; guest
  # time is already counted in user and nice.
  total = sum(vals[:8])
  return (total - vals[3] - vals[4]) / _CLK_TCK, vals[7] / _CLK_TCK


def gc_counters(metrics_port):
  """reverie's garbage collector so far, from its /metrics on loopback:
  (cycles completed, CPU seconds as the Go runtime estimates them), or
  None (no port, or the scrape failed). The runtime adds a cycle's CPU
  when the cycle ends, so a window is charged with the collections that
  end in it. Read it outside a window whose server CPU is measured: a
  scrape costs the server a little CPU."""
  if not metrics_port:
    return None
  try:
    with urllib.request.urlopen(f'http://127.0.0.1:{metrics_port}/metrics', timeout=5) as r:
      text = r.read().decode()
  except OSError:
    return None
  vals = {}
  for line in text.splitlines():
    name, _, v = line.partition(' ')
    if name in ('go_gc_cycles_total_gc_cycles_total', 'go_cpu_classes_gc_total_cpu_seconds_total'):
      vals[name] = float(v)
  if len(vals) < 2:
    return None
  return vals['go_gc_cycles_total_gc_cycles_total'], vals['go_cpu_classes_gc_total_cpu_seconds_total']


def add_gc(stats, gc0, gc1):
  """Adds gc_cycles and gc_cpu_sec to a window's stats, given the
  counters before and after it (either may be None: nothing added)."""
  if stats and gc0 and gc1:
    stats['gc_cycles'] = int(gc1[0] - gc0[0])
    stats['gc_cpu_sec'] = round(gc1[1] - gc0[1], 3)


def reset_peak_rss(pid):
  """Resets VmHWM to the current RSS (Linux >= 4.0); False if not allowed."""
  try:
    with open(f'/proc/{pid}/clear_refs', 'w') as f:
      f.write('5')
    return True
  except OSError:
    return False


class Window:
  """CPU seconds and peak RSS of a process between start() and stop()."""

  def __init__(self, pid):
    self.pid = pid
    self.cpu0 = None
    self.hwm_reset = False

  def start(self):
    if self.pid:
      self.hwm_reset = reset_peak_rss(self.pid)
      self.cpu0 = cpu_seconds(self.pid)
    self.machine0 = machine_seconds()
    self.t0 = time.monotonic()
    return self

  def stop(self):
    """A dict of server figures over the window (empty without a pid)."""
    if not self.pid:
      return {}
    cpu = cpu_seconds(self.pid) - self.cpu0
    busy, steal = (b - a for a, b in zip(self.machine0, machine_seconds()))
    return {
        'pid': self.pid,
        'cpu_sec': round(cpu, 3),
        # every process on the machine, for telling how much others ran
        'machine_busy_sec': round(busy, 3),
        'machine_steal_sec': round(steal, 3),
        'wall_sec': round(time.monotonic() - self.t0, 3),
        'peak_rss_mb': round(status_kb(self.pid, 'VmHWM') / 1024, 1),
        'rss_mb_after': round(status_kb(self.pid, 'VmRSS') / 1024, 1),
        'peak_rss_is_per_run': self.hwm_reset,
    }
