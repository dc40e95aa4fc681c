// The Go baseline of `shoal bench fibers`: the Stackless hackysack benchmark
// (and its hop and switch variants) written with goroutines and unbuffered
// channels, with the same semantics, PRNG, seeds and timing (runs the C side
// groups into repeats of timed loops after a warm-up) as
// bench/suite_fibers.c, so the two rows of a case differ only in the runtime.
// The C side builds this file with the stdlib only and runs one process per
// case; it parses the single "ok ..." or "error ..." line printed at the end.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

type sacker struct {
	ch  chan *sacker
	idx uint32
}

// One runit. counter and rng are touched only by the goroutine holding the
// sack; the channel handoff orders those accesses, as in the C version.
type run struct {
	s       []*sacker
	turns   uint64
	counter uint64
	rng     uint64
	sample  bool
	pssKib  int64
	pause   time.Duration
	wg      sync.WaitGroup
}

func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// xorshift64*, the same generator as the C side.
func (r *run) next() uint64 {
	x := r.rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	r.rng = x
	return x * 0x2545F4914F6CDD1D
}

func (r *run) pick(total uint32) uint32 {
	return uint32(((r.next() >> 32) * uint64(total)) >> 32)
}

func selfPssKib() int64 {
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "Pss:" {
			v, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

func (r *run) loop(me *sacker) {
	defer r.wg.Done()
	total := uint32(len(r.s))
	for {
		msg := <-me.ch
		if msg == nil {
			return
		}
		// A rendezvous send to oneself would deadlock: draw again.
		to := r.pick(total)
		for to == me.idx {
			to = r.pick(total)
		}
		r.counter++
		if r.counter >= r.turns {
			if r.sample {
				t := time.Now()
				r.pssKib = selfPssKib()
				r.pause = time.Since(t)
			}
			for i, o := range r.s {
				if uint32(i) != me.idx {
					o.ch <- nil
				}
			}
			return
		}
		r.s[to].ch <- me
	}
}

func runit(n uint32, turns uint64, seed uint64, sample bool) (time.Duration, *run) {
	t0 := time.Now()
	r := &run{turns: turns, rng: splitmix64(seed), sample: sample, pssKib: -1}
	if r.rng == 0 {
		r.rng = 1
	}
	r.s = make([]*sacker, n+1)
	for i := range r.s {
		r.s[i] = &sacker{ch: make(chan *sacker), idx: uint32(i)}
	}
	r.wg.Add(len(r.s))
	for _, s := range r.s {
		go r.loop(s)
	}
	r.s[0].ch <- r.s[0]
	r.wg.Wait()
	return time.Since(t0) - r.pause, r
}

func pingpongYield(iters uint64) time.Duration {
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Add(2)
	for k := 0; k < 2; k++ {
		go func() {
			defer wg.Done()
			for i := uint64(0); i < iters; i++ {
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

func pingpongChan(iters uint64) (time.Duration, bool) {
	var wg sync.WaitGroup
	ab, ba := make(chan uint64), make(chan uint64)
	ok := true
	t0 := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < iters; i++ {
			ab <- i
			if <-ba != i {
				ok = false
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := uint64(0); i < iters; i++ {
			ba <- <-ab
		}
	}()
	wg.Wait()
	return time.Since(t0), ok
}

func main() {
	test := flag.String("test", "hackysack", "hackysack, hop or switch")
	n := flag.Uint("n", 10000, "sackers besides the first")
	turns := flag.Uint64("turns", 1000, "kicks before everyone goes home")
	reps := flag.Int("reps", 3, "runs, each timed and printed")
	variant := flag.String("variant", "yield", "switch: yield or chan")
	switches := flag.Uint64("switches", 1000000, "switch: handoffs to time")
	flag.Parse()

	var times []string
	pss := int64(-1)
	procs := runtime.GOMAXPROCS(0)
	switch *test {
	case "hackysack", "hop":
		if *n < 1 || *turns < 1 || *n > 1<<31 {
			fmt.Println("error need n >= 1 and turns >= 1")
			os.Exit(1)
		}
		for i := 0; i < *reps; i++ {
			runtime.GC()
			// Pss is sampled in the first (warm-up) run, as on the C
			// side: sampling disturbs the caches of the run after it.
			el, r := runit(uint32(*n), *turns, uint64(0x5eed+i), i == 0)
			if r.counter != *turns {
				fmt.Printf("error counter %d != turns %d\n", r.counter, *turns)
				os.Exit(1)
			}
			if r.pssKib >= 0 {
				pss = r.pssKib
			}
			times = append(times, strconv.FormatFloat(el.Seconds(), 'g', 9, 64))
		}
	case "switch":
		// A handoff on one thread, which is what one shoal scheduler does;
		// with more Ps the two goroutines would just run side by side.
		procs = 1
		runtime.GOMAXPROCS(1)
		for i := 0; i < *reps; i++ {
			runtime.GC()
			var el time.Duration
			switch *variant {
			case "yield":
				el = pingpongYield(*switches / 2)
			case "chan":
				var ok bool
				el, ok = pingpongChan(*switches / 2)
				if !ok {
					fmt.Println("error ping-pong value mismatch")
					os.Exit(1)
				}
			default:
				fmt.Printf("error unknown variant %q (expected yield or chan)\n", *variant)
				os.Exit(1)
			}
			times = append(times, strconv.FormatFloat(el.Seconds(), 'g', 9, 64))
		}
	default:
		fmt.Printf("error unknown test %q (expected hackysack, hop or switch)\n", *test)
		os.Exit(1)
	}
	fmt.Printf("ok t=%s pss_kib=%d gomaxprocs=%d go=%s\n", strings.Join(times, ","), pss,
		procs, runtime.Version())
}
