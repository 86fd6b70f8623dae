"""Synchronous data-parallel training with TensorFlow's MultiWorkerMirroredStrategy on CPU.

Primus sets TF_CONFIG for roles with `framework: tensorflow`:
    {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}
The strategy reads it, starts this worker's gRPC server on its port (the first one
Primus reserved) and connects to the others; every step the gradients are averaged
across all workers with a collective all-reduce, so all copies of the model stay equal.

Each worker trains a tiny MLP on its own synthetic regression data (seeded by its task
index). At the end every worker checks that its parameters are identical to everyone
else's (the point of synchronous data parallelism) and exits 1 if not; worker 0 prints
the final loss. Without TF_CONFIG it runs as a single worker, for a quick local try.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # hide TensorFlow's start-up chatter

import tensorflow as tf  # noqa: E402

STEPS = int(os.environ.get("STEPS", "40"))
LOG_EVERY = int(os.environ.get("LOG_EVERY", "10"))
BATCH = int(os.environ.get("BATCH_SIZE", "64"))
LR = float(os.environ.get("LR", "0.05"))
DIM, HIDDEN = 8, 16

# The strategy must be created before any other TensorFlow op runs.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
task = tf_config.get("task", {"type": "worker", "index": 0})
num_workers = len(tf_config.get("cluster", {}).get(task["type"], [None]))
index = int(task["index"])


def log(msg):
    print(f"[{task['type']}-{index}] {msg}", flush=True)


# Check that the strategy really spans every worker in TF_CONFIG (one CPU replica each).
if strategy.num_replicas_in_sync != num_workers:
    sys.exit(f"expected {num_workers} replicas in sync, got {strategy.num_replicas_in_sync}")

# Same true function for everyone, different samples per worker.
true_w = tf.random.stateless_normal([DIM, 1], seed=[1, 2])
x_all = tf.random.stateless_normal([1024, DIM], seed=[index, 3])
y_all = tf.tanh(x_all @ true_w) + 0.05 * tf.random.stateless_normal([1024, 1], seed=[index, 4])
# Each worker feeds its own data: no auto-sharding across workers.
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.from_tensor_slices((x_all, y_all)).repeat().shuffle(1024, seed=index).batch(BATCH)
batches = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

with strategy.scope():
    # Created inside the scope: mirrored variables, initialised identically on every worker
    # (worker 0 broadcasts its initial values to the others).
    params = [
        tf.Variable(tf.random.normal([DIM, HIDDEN], stddev=0.5), name="w1"),
        tf.Variable(tf.zeros([HIDDEN]), name="b1"),
        tf.Variable(tf.random.normal([HIDDEN, 1], stddev=0.5), name="w2"),
        tf.Variable(tf.zeros([1]), name="b2"),
    ]
    optimizer = tf.keras.optimizers.SGD(learning_rate=LR)


def mse(x, y):
    w1, b1, w2, b2 = params
    return tf.reduce_mean(tf.square(tf.tanh(x @ w1 + b1) @ w2 + b2 - y))


@tf.function
def train_step(it):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = mse(x, y)
            # The optimizer SUMs the gradients of all replicas (an all-reduce across workers),
            # so each replica contributes 1/N of its loss: the step uses the global mean gradient.
            scaled = loss / strategy.num_replicas_in_sync
        optimizer.apply_gradients(zip(tape.gradient(scaled, params), params, strict=True))
        return loss

    per_replica = strategy.run(replica_step, args=next(it))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)


@tf.function
def max_param_divergence():
    # How far this worker's copy is from the average copy, summed over all workers: 0 when in sync.
    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        total = 0.0
        for p in params:
            local = tf.identity(p)  # this replica's own value
            mean = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, local)
            total += tf.reduce_max(tf.abs(local - mean))
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, total)

    # Every replica holds the same all-reduced total; MEAN just picks it.
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(replica_fn), axis=None)


log(f"{num_workers} workers in sync, training {STEPS} steps")
first = None
for step in range(1, STEPS + 1):
    loss = float(train_step(batches))
    first = loss if first is None else first
    if step % LOG_EVERY == 0:
        log(f"step {step} loss {loss:.4f}")

divergence = float(max_param_divergence())
if index == 0:
    log(f"final loss {loss:.4f} (from {first:.4f})")
if divergence > 1e-6:
    log(f"parameters differ across workers (divergence {divergence:g})")
    sys.exit(1)
log(f"parameters identical on all {num_workers} workers")
if not loss < first:
    log("loss did not decrease")
    sys.exit(1)
