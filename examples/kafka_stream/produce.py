"""Produce N JSON click records to a topic (made with 3 partitions if missing):
python produce.py BOOTSTRAP TOPIC N"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})
if topic not in admin.list_topics(timeout=10).topics:
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
for i in range(count):
    while True:
        try:
            producer.produce(topic, key=str(i % 1000).encode(),
                             value=json.dumps({"id": i, "page": f"/p/{i % 7}"}).encode())
            break
        except BufferError:
            producer.poll(0.1)
producer.flush(60)
print(f"{count} records produced to {topic}")
