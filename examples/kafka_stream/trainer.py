"""A stand-in trainer for a click stream: reads JSON records from stdin (data.reader.records undoes
the feed's framing and tells the executor exactly which records it is done with), "trains" on them
and prints a summary line at EOF."""

import json
import sys
from collections import Counter

from primus_runtime.data.reader import records

pages: Counter = Counter()
count = 0
for record in records(sys.stdin.buffer):
    event = json.loads(record)
    pages[event.get("page", "?")] += 1
    count += 1
    if count % 20000 == 0:
        print(f"trained on {count} records", flush=True)
print(json.dumps({"records": count, "top_pages": pages.most_common(3)}))
