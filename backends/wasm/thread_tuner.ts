/**
 * The thread tuner: whether a wasm program's runs use its worker threads, decided by timing the
 * two ways against each other and kept under review as V8's code and the machine's load change.
 *
 * @module
 */

/**
 * Whether a program's runs use its worker threads, decided by timing and kept under review.
 *
 * After {@linkcode ThreadTuner.WARM} runs, runs alternate between threaded and single-threaded
 * until each way has {@linkcode ThreadTuner.SAMPLES} timings (one, where the threads win by
 * {@linkcode ThreadTuner.DECISIVE}'s ratio, or by the margin with a run alone costing
 * {@linkcode ThreadTuner.PROBE_MS} more); the faster way (by the fastest of its latest timings)
 * is chosen. The first threaded run with the workers up is not a sample:
 * its workers' code is cold. A verdict too close to call (see
 * {@linkcode ThreadTuner.CLOSE}) takes more samples, up to {@linkcode ThreadTuner.MOST} a way.
 *
 * The first verdict times code V8 is still optimizing, on every core: on the 2-core machine
 * vit_tiny's early threaded runs read 3–8 ms and its steady ones 1.4 ms (2.2 ms alone), so one
 * process in two kept one thread for good. So the verdict stays under review: after
 * {@linkcode ThreadTuner.FIRST_PROBE} runs ({@linkcode ThreadTuner.CLEAR_PROBE} when one way
 * was twice as fast), then at doubling gaps (at most
 * {@linkcode ThreadTuner.LAST_PROBE}), one run goes the other way, and the choice switches when
 * the other way's latest timings beat the chosen way's by the margin. A probe costs at most one
 * run in eight, fewer as the gaps grow, and at most {@linkcode ThreadTuner.PROBE_SHARE} of the
 * runs' time where the other way is much slower or a probe costs
 * {@linkcode ThreadTuner.PROBE_MS} or more.
 * Hand-off costs are the machine's, not the kernel's: on a 2-core machine lenet ran 0.50 ms on
 * one thread and 1.01 ms on two; on 16 cores the threaded runs of small models were worse still.
 */
export class ThreadTuner {
  /** Runs before timing starts (code tiers up, workers spawn). */
  static readonly WARM = 2;
  /** Timings per way for a first verdict, and the latest timings a verdict reads. */
  static readonly SAMPLES = 3;
  /** Timings per way at most, when the first verdict is close. */
  static readonly MOST = 8;
  /**
   * Threaded ÷ single-threaded at or below which one timing of each way is a first verdict: a run
   * on one thread then costs four threaded ones or more (ResNet-18 on the 16-core host: 400 ms
   * against 46, and three such samples were 0.8 s of its early runs).
   */
  static readonly DECISIVE = 0.25;
  /** Threaded ÷ single-threaded (fastest runs) between which a first verdict is close. */
  static readonly CLOSE: readonly [number, number] = [0.8, 1.05];
  /** Runs after the first verdict at which the other way is first tried again. */
  static readonly FIRST_PROBE = 2;
  /** Runs after a first verdict of a 2× or wider margin at which the other way is first tried. */
  static readonly CLEAR_PROBE = 32;
  /** The longest gap between two such tries. */
  static readonly LAST_PROBE = 1024;
  /**
   * The share of the runs' time a probe may take where the other way is twice as slow or more,
   * or a probe costs {@linkcode ThreadTuner.PROBE_MS} or more: a probe of a way `c` times slower
   * than the chosen one costs `c - 1` runs, so the next comes no sooner than
   * `(c - 1) / PROBE_SHARE` runs on (cheaper, closer calls keep their early probes, which catch a
   * verdict made on code V8 was still optimizing). On the 16-core H200 host ResNet-50 at batch 1
   * ran 35-38 ms threaded and 356-437 alone, and its probe at run 38 (`CLEAR_PROBE` after the
   * verdict) cost ten runs' worth in every process; a 0.5B decoder's decode step (14-16 ms
   * threaded) took 87-96 ms once in each generation of 64 tokens.
   */
  static readonly PROBE_SHARE = 0.02;
  /**
   * Milliseconds a probe costs from which {@linkcode ThreadTuner.PROBE_SHARE} spaces it however
   * close the two ways are: ViT-B/16 on two of the 16-core host's cores ran 634-658 ms threaded
   * and 830-1045 alone, and its early probes (two runs, then four, eight: a close call's) put
   * two or three runs alone among runs 5-14, so their median read 784 ms.
   */
  static readonly PROBE_MS = 20;
  /**
   * Threaded ÷ single-threaded ratios reached only near the threads' full scaling count as
   * {@linkcode ThreadTuner.DECISIVE} and as a clear margin: at most 1.25 / threads (two threads
   * can at best halve a run: BERT-base on the 2-core VM ran 0.3 s threaded against 0.63 alone,
   * never the 4× of `DECISIVE`, so three runs alone fell among a caller's first ten and probes
   * every few runs after).
   */
  static readonly SCALING = 1.25;
  #runs = 0;
  /** Timings single-threaded and threaded, latest last. */
  #times: [number[], number[]] = [[], []];
  #choice?: boolean;
  /** Whether a threaded run with the workers up has happened (the workers' warm-up). */
  #warmThreads = false;
  /** Whether the current probe of the threads has had its waking run. */
  #woken = false;
  /** Runs until the next probe, and the gap after it. */
  #untilProbe = ThreadTuner.FIRST_PROBE;
  #gap = ThreadTuner.FIRST_PROBE;
  /** The ratios at or below which one timing a way decides, and a verdict is clear. */
  #decisive: number = ThreadTuner.DECISIVE;
  #clear = 0.5;

  /**
   * A tuner, starting from `verdict` when an earlier process on this machine reached one (the
   * first probe of the other way then comes after {@linkcode ThreadTuner.CLEAR_PROBE} runs), for
   * runs on `threads` threads (unknown: the fixed ratios).
   */
  constructor(verdict?: boolean, threads?: number) {
    if (threads) {
      const full = ThreadTuner.SCALING / threads;
      this.#decisive = Math.max(this.#decisive, full);
      this.#clear = Math.max(this.#clear, full);
    }
    if (verdict === undefined) return;
    this.#choice = verdict;
    this.#untilProbe = this.#gap = ThreadTuner.CLEAR_PROBE;
  }

  /** Whether the next run should use the threads. */
  next(): boolean {
    if (this.#choice === undefined) {
      return this.#runs < ThreadTuner.WARM || (this.#runs - ThreadTuner.WARM) % 2 === 0;
    }
    return this.#untilProbe === 0 ? !this.#choice : this.#choice;
  }

  /**
   * Records a run that took `ms` with threads or without; `ready` says whether the workers were
   * up (until they are, a threaded run is a single-threaded one and times nothing).
   */
  record(threads: boolean, ms: number, ready: boolean): void {
    if (!ready) return;
    if (this.#runs++ < ThreadTuner.WARM) return;
    if (threads && !this.#warmThreads) {
      this.#warmThreads = true;
      return;
    }
    // A probe of the threads after runs without them finds the workers asleep, and on a busy
    // 16-core host waking them cost more than the run (vit_tiny: 9.4 ms against 1.5 a run once
    // awake): the probe's first run wakes them and times nothing, the next one probes.
    if (this.#choice === false && this.#untilProbe === 0 && !this.#woken) {
      this.#woken = true;
      return;
    }
    this.#woken = false;
    const times = this.#times[threads ? 1 : 0];
    times.push(ms);
    if (times.length > ThreadTuner.MOST) times.shift();
    const [alone, threaded] = this.#times.map((t) => Math.min(...t.slice(-ThreadTuner.SAMPLES)));
    // Threads must win by a margin, as a run on one thread leaves the other cores to the rest of
    // the process; the fastest timing of each way, as interference only ever adds time.
    const ratio = threaded / alone;
    if (this.#choice === undefined) {
      const samples = Math.min(...this.#times.map((t) => t.length));
      const [low, high] = ThreadTuner.CLOSE;
      // One timing a way decides where the threads win decisively, or clearly and a run alone
      // costs PROBE_MS more (ViT-B/16 on two cores: three runs alone of 830-1045 ms against
      // 634-658 threaded fell among runs 5-14); a later probe reviews it.
      const costly = ratio < low && alone - threaded >= ThreadTuner.PROBE_MS;
      const one = samples > 0 && (ratio <= this.#decisive || costly);
      if (samples < ThreadTuner.SAMPLES && !one) return;
      if (ratio >= low && ratio < high && samples < ThreadTuner.MOST) return;
      this.#choice = ratio < 0.9;
      // A probe of a way two or more times slower costs that much: on the 16-core host one run
      // of shufflenet alone took 25-35 ms against 6 threaded, and probes at runs 2, 6 and 14 put
      // three of those among a caller's first twenty runs.
      const clear = ratio <= this.#clear || ratio > 2;
      this.#probeAfter(clear ? ThreadTuner.CLEAR_PROBE : ThreadTuner.FIRST_PROBE, alone, threaded);
      return;
    }
    if (this.#untilProbe-- > 0) return;
    this.#choice = ratio < (this.#choice ? 1 / 0.9 : 0.9);
    this.#probeAfter(this.#gap * 2, alone, threaded);
  }

  /**
   * The next probe `gap` runs on, or later where the other way (runs of `alone` and `threaded`
   * ms) is so much slower that it would cost more than {@linkcode ThreadTuner.PROBE_SHARE}.
   */
  #probeAfter(gap: number, alone: number, threaded: number): void {
    const [chosen, other] = this.#choice ? [threaded, alone] : [alone, threaded];
    const costly = other >= 2 * chosen || other - chosen >= ThreadTuner.PROBE_MS;
    const cost = costly ? Math.ceil((other / chosen - 1) / ThreadTuner.PROBE_SHARE) : 0;
    this.#gap = Math.min(ThreadTuner.LAST_PROBE, Math.max(gap, cost));
    this.#untilProbe = this.#gap;
  }

  /**
   * Takes one thread as the verdict, where none is in yet, as a stored verdict would be (the
   * threads are first tried after {@linkcode ThreadTuner.CLEAR_PROBE} runs).
   */
  presumeAlone(): void {
    if (this.#choice !== undefined) return;
    this.#choice = false;
    this.#untilProbe = this.#gap = ThreadTuner.CLEAR_PROBE;
  }

  /** The way runs take now, once a first verdict is in. */
  get choice(): boolean | undefined {
    return this.#choice;
  }
}
