"""The same library code means different things by where it is called (catalogs/frames.py
CALL_PATHS): a stack's category is its leaf's as its outermost deciding frame reads it. Stacks are
written as py-spy reports them (root first, qualified function names, full file paths)."""
from __future__ import annotations

import pytest

from diagnose.catalogs.frames import Category
from diagnose.signals.stacks import Frame, call_path, categorize

SITE = "/srv/.venv/lib/python3.11/site-packages"
LOOP = [Frame("<module>", "/srv/train.py", 40), Frame("train", "/srv/train.py", 30)]
FETCH = [Frame("_BaseDataLoaderIter.__next__", f"{SITE}/torch/utils/data/dataloader.py", 733),
         Frame("_SingleProcessDataLoaderIter._next_data", f"{SITE}/torch/utils/data/dataloader.py", 789),
         Frame("_MapDatasetFetcher.fetch", f"{SITE}/torch/utils/data/_utils/fetch.py", 52),
         Frame("Images.__getitem__", "/srv/data.py", 38)]
PILLOW = [Frame("Image.resize", f"{SITE}/PIL/Image.py", 2440), Frame("ImageFile.load", f"{SITE}/PIL/ImageFile.py", 425)]
FORWARD = [Frame("Module._wrapped_call_impl", f"{SITE}/torch/nn/modules/module.py", 1778),
           Frame("Module._call_impl", f"{SITE}/torch/nn/modules/module.py", 1789),
           Frame("Net.forward", "/srv/net.py", 12)]
HANDLER = [Frame("BaseHTTPRequestHandler.handle_one_request", "/usr/lib/python3.11/http/server.py", 424),
           Frame("Handler.do_POST", "/srv/serve.py", 60), Frame("decode", "/srv/serve.py", 20)]
WAIT_WORKERS = [Frame("_MultiProcessingDataLoaderIter._next_data", f"{SITE}/torch/utils/data/dataloader.py", 1448),
                Frame("_MultiProcessingDataLoaderIter._get_data", f"{SITE}/torch/utils/data/dataloader.py", 1412),
                Frame("_MultiProcessingDataLoaderIter._try_get_data", f"{SITE}/torch/utils/data/dataloader.py", 1256),
                Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
                Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 324)]
WORKER = [Frame("_worker_loop", f"{SITE}/torch/utils/data/_utils/worker.py", 349)]
LIB = "/usr/lib/python3.11"
LOOP_RUN = [Frame("<module>", "/srv/app.py", 80), Frame("run", f"{LIB}/asyncio/runners.py", 190),
            Frame("BaseEventLoop.run_forever", f"{LIB}/asyncio/base_events.py", 607),
            Frame("BaseEventLoop._run_once", f"{LIB}/asyncio/base_events.py", 1922)]
CALLBACK = [Frame("Handle._run", f"{LIB}/asyncio/events.py", 80), Frame("handle", "/srv/app.py", 30)]
URLOPEN = [Frame("urlopen", f"{LIB}/urllib/request.py", 216), Frame("HTTPResponse.begin", f"{LIB}/http/client.py", 318),
           Frame("SocketIO.readinto", f"{LIB}/socket.py", 706)]


@pytest.mark.parametrize("name, frames, path, category", [
    ("Pillow under the DataLoader's fetch: the input pipeline", LOOP + FETCH + PILLOW, "input_pipeline",
     Category.INPUT_PIPELINE),
    ("plain Python in __getitem__: the input pipeline too", LOOP + FETCH, "input_pipeline", Category.INPUT_PIPELINE),
    ("the loop waiting for its workers' batch: waiting on the input pipeline", LOOP + WAIT_WORKERS,
     "input_pipeline", Category.INPUT_WAIT),
    ("a worker process decoding: the input pipeline", WORKER + FETCH[2:] + PILLOW, "data_worker",
     Category.INPUT_PIPELINE),
    ("a worker waiting for its next index: waiting for work",
     WORKER + [Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
               Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 324)], "data_worker", Category.HANDOFF),
    ("Pillow in a request handler before the model: pre-processing", HANDLER + PILLOW, None, Category.PREPROCESS),
    ("Pillow under the model's forward: model work", LOOP + FORWARD + PILLOW, "model", Category.FRAMEWORK_COMPUTE),
    ("a synchronous HTTP call inside a coroutine: the loop is blocked", LOOP_RUN + CALLBACK + URLOPEN,
     "loop_callback", Category.LOOP_BLOCKED),
    ("time.sleep inside a coroutine blocks the loop too", LOOP_RUN + CALLBACK, "loop_callback",
     Category.LOOP_BLOCKED),
    ("asyncio's own non-blocking recv in a transport callback is not a blocked loop", LOOP_RUN + [
        Frame("Handle._run", f"{LIB}/asyncio/events.py", 80),
        Frame("_SelectorSocketTransport._read_ready", f"{LIB}/asyncio/selector_events.py", 1010),
        Frame("_SelectorSocketTransport._read_ready__data_received", f"{LIB}/asyncio/selector_events.py", 1027)],
     "loop_callback", Category.IO_WAIT),
    ("the loop in its selector with nothing to do waits for work", LOOP_RUN + [
        Frame("EpollSelector.select", f"{LIB}/selectors.py", 468)], None, Category.IDLE),
    ("torch ops under the forward stay model work", LOOP + FORWARD + [
        Frame("Conv2d._conv_forward", f"{SITE}/torch/nn/modules/conv.py", 560)], "model", Category.FRAMEWORK_COMPUTE),
])
def test_the_outermost_deciding_frame_reads_the_leaf(name, frames, path, category):
    stack = tuple(frames)
    sources = {("/srv/app.py", 30): "    time.sleep(0.05)",
               (f"{LIB}/asyncio/selector_events.py", 1027): "            data = self._sock.recv(self.max_size)"}
    assert call_path(stack) == path, name
    assert categorize(stack, sources) == category, name


def test_a_fetch_that_calls_a_model_is_still_the_input_pipeline():
    """The outermost frame decides: a Dataset that runs a model (feature extraction) in __getitem__
    is still the loop waiting for data."""
    stack = tuple(LOOP + FETCH + FORWARD + [Frame("Linear.forward", f"{SITE}/torch/nn/modules/linear.py", 125)])
    assert call_path(stack) == "input_pipeline" and categorize(stack, {}) == Category.INPUT_PIPELINE
