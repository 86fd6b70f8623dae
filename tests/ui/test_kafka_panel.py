"""The data panel's Kafka part in a real browser, against a real job reading a real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.conftest import STALL_LAG, STALL_READ, KafkaBroker, kafka_broker, submit_stalled_job  # noqa: F401
from playwright.sync_api import expect

from primus_runtime.client import PrimusClient
from ui.test_browser import sign_in


@pytest.fixture(scope="module")
def stalled(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
            ) -> Iterator[tuple[PrimusClient, str]]:
    client = PrimusClient(tmp_path_factory.mktemp("ui-kafka") / "home")
    app, _ = submit_stalled_job(client, kafka_broker.bootstrap, tmp_path_factory.mktemp("ui-kafka-out"))
    yield client, app
    client.cluster("local").force_kill(app)


def test_the_kafka_panel_shows_the_lag_and_every_partition_with_its_holder(stalled, page):
    client, app = stalled
    address, token = client.cluster("local").am_endpoint(app)
    status = client.status(app)
    kafka = status.data.kafka
    sign_in(page, f"http://{address}", token, "kim")

    line = page.locator("#kafka-line")
    expect(line).to_contain_text(f"lag {3 * STALL_LAG:,} records")
    expect(line).to_contain_text(f"watermark {kafka.watermark}")
    expect(line).to_contain_text("brokers reachable")
    expect(page.locator("#kafka-source")).to_contain_text(kafka.topics[0])
    rows = page.locator("#kafka-partitions tr")
    expect(rows).to_have_count(3)
    executor_of = {ex.incarnation: ex.id for ex in status.executors}
    for i, p in enumerate(kafka.partitions):
        expect(rows.nth(i).locator("td")).to_have_text([
            p.topic, str(p.partition), executor_of[p.holder], str(STALL_READ - 1), f"{p.high:,}",
            str(STALL_LAG), p.time])
