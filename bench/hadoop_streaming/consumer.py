"""The trainer both sides of bench/hadoop_streaming.py run: reads text records (one per line) on
stdin, spends a fixed CPU cost on each, and prints ``records<TAB>N`` when stdin ends.

argv[1]: rounds of SHA-256 per record (the "training" cost). Standard library only, so it runs
the same as a Hadoop Streaming mapper and as a Primus trainer.
"""

import hashlib
import sys

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
count = 0
checksum = 0
for line in sys.stdin.buffer:
    digest = line
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    checksum ^= digest[0]
    count += 1
# The checksum keeps the work from being optimised away and is not compared.
sys.stdout.write(f"records\t{count}\nchecksum\t{checksum}\n")
