"""Parameter-server training with nothing but the standard library.

One file, two roles, picked by $PRIMUS_ROLE:

ps      serves one shard of the model's parameters over TCP on $PRIMUS_PORT and
        applies the gradients workers push (plain SGD). Runs until SIGTERM: Primus
        stops the ps once every worker has succeeded.
worker  reads the ps addresses from $PRIMUS_CLUSTER, makes its own synthetic
        linear-regression data (seeded by $PRIMUS_INDEX), and for $STEPS steps
        pulls the parameters, computes the gradient of a minibatch and pushes it
        back. Workers do not wait for each other (asynchronous SGD, as in the
        classic parameter-server design). With DATA=stdin it trains instead on
        the samples Primus feeds it (JSON lines {"x": [...], "y": ...}, the job's
        input) until end of input.
evaluator
        loads the model the ps saved in $MODEL_DIR and measures its loss on
        held-out samples; exits 1 if the model is no better than an untrained one.

With $MODEL_DIR set, each ps saves its shard there when it is stopped (the job
is done), as ps-<index>.json. `python3 trainer.py make-partition DIR N` writes N
samples as one day's input partition (part-*.jsonl and a _SUCCESS marker).

Wire format: one JSON object per line, one reply line per request.
    {"op": "pull", "keys": [k, ...]}                -> {"values": [v, ...]}
    {"op": "push", "keys": [k, ...], "grads": [...]} -> {"ok": true}
Parameter k lives on ps shard k % number_of_ps.

Works under Python 3.9+ (hence zip() without strict=).
"""

# ruff: noqa: B905

import json
import os
import random
import signal
import socket
import socketserver
import sys
import threading
import time
import zlib

DIM = 8  # features; parameter DIM is the bias
NUM_PARAMS = DIM + 1
NOISE = 0.1


def log(msg):
    print("[{}-{}] {}".format(os.environ.get("PRIMUS_ROLE", "?"), os.environ.get("PRIMUS_INDEX", "?"), msg), flush=True)


# --- ps ------------------------------------------------------------------------


class Shard:
    """The parameters this ps owns. Unknown keys start at 0.0, so the ps needs no model config."""

    def __init__(self, lr):
        self.lr = lr
        self.params = {}
        self.lock = threading.Lock()  # one handler thread per worker connection
        self.pushes = 0

    def pull(self, keys):
        with self.lock:
            return [self.params.get(k, 0.0) for k in keys]

    def push(self, keys, grads):
        with self.lock:
            for k, g in zip(keys, grads):
                self.params[k] = self.params.get(k, 0.0) - self.lr * g
            self.pushes += 1


class Handler(socketserver.StreamRequestHandler):
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small request/reply messages

    def handle(self):
        shard = self.server.shard
        for line in self.rfile:  # one connection carries many requests
            req = json.loads(line)
            if req["op"] == "pull":
                reply = {"values": shard.pull(req["keys"])}
            elif req["op"] == "push":
                shard.push(req["keys"], req["grads"])
                reply = {"ok": True}
            else:
                reply = {"error": "unknown op {!r}".format(req["op"])}
            self.wfile.write((json.dumps(reply) + "\n").encode())
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True  # a restarted ps can rebind the port at once
    daemon_threads = True  # open worker connections must not keep the process alive after SIGTERM


def run_ps():
    port = int(os.environ["PRIMUS_PORT"])  # reserved for us by Primus; our address in PRIMUS_CLUSTER
    # 0.0.0.0: workers dial the host:port in PRIMUS_CLUSTER, whichever interface that name resolves to.
    server = Server(("0.0.0.0", port), Handler)
    server.shard = Shard(lr=float(os.environ.get("LR", "0.01")))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # serve_forever runs in a thread: shutdown() would deadlock if called from the serving thread.
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"serving shard {os.environ.get('PRIMUS_INDEX')} of {os.environ.get('PRIMUS_NUM_PS', '?')} on port {port}")

    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    log(f"SIGTERM: stopping after {server.shard.pushes} pushes ({len(server.shard.params)} params held)")
    model_dir = os.environ.get("MODEL_DIR")
    if model_dir:
        os.makedirs(model_dir, exist_ok=True)
        path = os.path.join(model_dir, "ps-{}.json".format(os.environ["PRIMUS_INDEX"]))
        with open(path + ".tmp", "w") as f:
            json.dump({str(k): v for k, v in server.shard.params.items()}, f)
        os.replace(path + ".tmp", path)  # the evaluator never reads half a shard
        log(f"saved shard to {path}")
    return 0


# --- worker --------------------------------------------------------------------


class PSClient:
    """A line-JSON connection to one ps shard."""

    def __init__(self, address, deadline):
        host, port = address.rsplit(":", 1)
        while True:  # the ps may still be binding its port: retry until the deadline
            try:
                self.sock = socket.create_connection((host, int(port)), timeout=30)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SystemExit(f"cannot reach ps at {address}: {exc}") from None
                time.sleep(0.2)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rwb")

    def call(self, req):
        self.file.write((json.dumps(req) + "\n").encode())
        self.file.flush()
        line = self.file.readline()
        if not line:
            raise ConnectionError("ps closed the connection")
        return json.loads(line)


def ps_addresses(deadline):
    """The ps addresses from PRIMUS_CLUSTER; a ps not registered yet (null) is looked up again
    in PRIMUS_CLUSTER_FILE, which Primus rewrites when the membership changes."""
    roles = json.loads(os.environ["PRIMUS_CLUSTER"])
    while None in roles.get("ps", [None]):
        path = os.environ.get("PRIMUS_CLUSTER_FILE")
        if not path or time.monotonic() > deadline:
            raise SystemExit("no complete ps list in PRIMUS_CLUSTER: {!r}".format(roles.get("ps")))
        time.sleep(0.5)
        try:
            with open(path) as f:
                roles = json.load(f)["roles"]
        except (OSError, ValueError, KeyError):
            pass  # not written yet
    return roles["ps"]


def make_data(seed, n=512):
    # Every worker fits the same true model (fixed seed), each on its own samples (seed = PRIMUS_INDEX).
    truth = random.Random(1234)
    w_true = [truth.uniform(-2, 2) for _ in range(DIM)]
    b_true = truth.uniform(-1, 1)
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        y = sum(wi * xi for wi, xi in zip(w_true, x)) + b_true + rng.gauss(0, NOISE)
        data.append((x, y))
    return data


def make_partition(directory, n, files=2):
    """One day of input: n samples as JSON lines over `files` files, then the _SUCCESS marker."""
    os.makedirs(directory, exist_ok=True)
    data = make_data(seed=zlib.crc32(os.path.abspath(directory).encode()), n=n)
    for part in range(files):
        with open(os.path.join(directory, f"part-{part:04d}.jsonl"), "w") as f:
            for x, y in data[part::files]:
                f.write(json.dumps({"x": x, "y": y}) + "\n")
    open(os.path.join(directory, "_SUCCESS"), "w").close()  # last: readers wait for it


def stdin_batches(batch_size, sample):
    """Minibatches of the samples Primus feeds on stdin; keeps a few in `sample` for the final loss."""
    batch = []
    for line in sys.stdin:
        row = json.loads(line)
        batch.append((row["x"], row["y"]))
        if len(sample) < 512:
            sample.append(batch[-1])
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def mse_and_grad(params, batch):
    w, b = params[:DIM], params[DIM]
    grad = [0.0] * NUM_PARAMS
    loss = 0.0
    for x, y in batch:
        err = sum(wi * xi for wi, xi in zip(w, x)) + b - y
        loss += err * err
        for i in range(DIM):
            grad[i] += 2 * err * x[i]
        grad[DIM] += 2 * err
    n = len(batch)
    return loss / n, [g / n for g in grad]


def run_worker():
    steps = int(os.environ.get("STEPS", "200"))
    log_every = int(os.environ.get("LOG_EVERY", "20"))
    batch_size = int(os.environ.get("BATCH_SIZE", "32"))
    index = int(os.environ["PRIMUS_INDEX"])
    deadline = time.monotonic() + float(os.environ.get("PS_CONNECT_TIMEOUT", "15"))

    shards = [PSClient(addr, deadline) for addr in ps_addresses(deadline)]
    # keys_of[s]: the parameter keys shard s owns
    keys_of = [[k for k in range(NUM_PARAMS) if k % len(shards) == s] for s in range(len(shards))]
    log(f"connected to {len(shards)} ps shards, training {steps} steps")

    def pull():
        params = [0.0] * NUM_PARAMS
        for shard, keys in zip(shards, keys_of):
            for k, v in zip(keys, shard.call({"op": "pull", "keys": keys})["values"]):
                params[k] = v
        return params

    def push(grad):
        for shard, keys in zip(shards, keys_of):
            shard.call({"op": "push", "keys": keys, "grads": [grad[k] for k in keys]})

    if os.environ.get("DATA") == "stdin":
        data = []  # a sample of what was fed, for the final loss
        batches = stdin_batches(batch_size, data)
    else:
        data = make_data(seed=index)
        rng = random.Random(index)
        batches = (rng.sample(data, batch_size) for _ in range(steps))
    rows = 0
    for step, batch in enumerate(batches, 1):
        loss, grad = mse_and_grad(pull(), batch)
        push(grad)
        rows += len(batch)
        if step % log_every == 0:
            log(f"step {step} loss {loss:.4f}")
    log(f"trained on {rows} samples")
    if not data:
        log("no input data for this worker")
        return 0
    untrained = mse_and_grad([0.0] * NUM_PARAMS, data)[0]  # the ps start every parameter at 0.0
    final_loss = mse_and_grad(pull(), data)[0]
    log(f"final loss {final_loss:.4f} (untrained model: {untrained:.4f})")
    # Fail loudly if training did not work, so a job that "succeeds" really trained. Compared with
    # the untrained model, not with step 0: a restarted worker resumes from trained parameters.
    if not final_loss < untrained / 10:
        log("loss did not decrease enough")
        return 1
    return 0


# --- evaluator -------------------------------------------------------------------


def run_evaluator():
    model_dir = os.environ["MODEL_DIR"]
    params = [0.0] * NUM_PARAMS
    shards = sorted(f for f in os.listdir(model_dir) if f.startswith("ps-") and f.endswith(".json"))
    if not shards:
        log(f"no model in {model_dir}: no ps-*.json shard")
        return 1
    for name in shards:
        with open(os.path.join(model_dir, name)) as f:
            for k, v in json.load(f).items():
                params[int(k)] = v
    held_out = make_data(seed=10**6)
    loss = mse_and_grad(params, held_out)[0]
    untrained = mse_and_grad([0.0] * NUM_PARAMS, held_out)[0]
    log(f"evaluation loss {loss:.4f} on held-out data (untrained model: {untrained:.4f}; {len(shards)} ps shards)")
    return 0 if loss < untrained / 10 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["make-partition"]:
        make_partition(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    role = os.environ.get("PRIMUS_ROLE")
    runs = {"ps": run_ps, "worker": run_worker, "evaluator": run_evaluator}
    if role not in runs:
        sys.exit(f"PRIMUS_ROLE must be one of {sorted(runs)}, got {role!r}")
    sys.exit(runs[role]())
