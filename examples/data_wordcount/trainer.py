"""Word count over the records Primus feeds on stdin (one text line per record).

Writes one summary line as JSON when stdin ends: the lines and words it consumed, its
most frequent words, and the first and last record ids (the first field of each line)
so that a test can check what reached which worker.
"""

import collections
import json
import os
import sys

words = collections.Counter()
lines = 0
ids = []
for raw in sys.stdin:
    fields = raw.split()
    if not fields:
        continue
    lines += 1
    ids.append(fields[0])
    words.update(fields[1:])
print(json.dumps({"worker": int(os.environ.get("PRIMUS_INDEX", 0)), "lines": lines, "words": sum(words.values()),
                  "top": words.most_common(3), "ids": ids}), flush=True)
