"""Stackless's hackysack on shoal's tasklets: n tasklets kick a sack to one another over
channels until it has been kicked `turns` times (the README walks through it).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/hackysack.py [N TURNS]
"""
import random
import sys
import timeit

import shoal


def hackysacker(me, circle, counter, turns):
    for msg in me:                            # receives until "exit"
        if msg == "exit":
            return
        counter[0] += 1
        if counter[0] >= turns:               # the last kick: everyone else goes home
            for other in circle:
                if other is not me:
                    other.send("exit")
            return
        kick = me
        while kick is me:
            kick = random.choice(circle)
        kick.send(me)                         # the receiver runs at once


def runit(n=10000, turns=1000):
    circle = [shoal.channel() for _ in range(n)]
    counter = [0]
    for ch in circle:
        shoal.tasklet(hackysacker)(ch, circle, counter, turns)
    shoal.tasklet(circle[0].send)(None)       # the first kick
    shoal.run()                               # returns when every tasklet has ended
    return counter[0]


if __name__ == "__main__":
    n, turns = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (10000, 1000)
    assert runit(n, turns) == turns
    best = min(timeit.repeat(lambda: runit(n, turns), number=1, repeat=5))
    print(f"hackysack({n}, {turns}): best of 5 {best * 1e3:.1f} ms")
