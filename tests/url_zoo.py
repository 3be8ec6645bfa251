"""A bounded HTTP server on 127.0.0.1 serving the failure zoo of a Flickr URL list, for the
img2dataset tests: images of every kind, broken bodies, error statuses, redirects to a
placeholder, a server that never answers within the client's timeout and one that
trickles. Only the loopback address is ever bound or named.

CASES: (case, path, expected) in list order; expected is 'kept', 'kept:<note>',
'failed_to_download', 'failed_to_resize', 'placeholder', 'skipped_by_make_tfrecords'.
"""
import http.server
import io
import threading
import time

import numpy as np
from PIL import Image

from helpers import smooth_pixels

TRICKLE_GAP = 0.1     # seconds between the trickling server's chunks: 1/50 of the tests'
TRICKLE_CHUNK = 32    # client timeout, while the whole body (3.5 KB) takes ~11 s, twice it
SLOW_LIMIT = 60.0     # the silent handler returns after this even if never released


def _jpeg(width, height, seed=0, mode='RGB', **kw):
    img = Image.fromarray(smooth_pixels(height, width, seed))
    buf = io.BytesIO()
    img.convert(mode).save(buf, 'JPEG', quality=90, **kw)
    return buf.getvalue()


def _exif_rotated(width, height):
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    return _jpeg(width, height, seed=5, exif=exif.tobytes())


def _png_rgba(width, height):
    rgba = np.zeros((height, width, 4), np.uint8)
    rgba[:, :width // 2] = (200, 100, 50, 0)     # fully transparent left half
    rgba[:, width // 2:] = (10, 200, 30, 255)    # opaque green right half
    buf = io.BytesIO()
    Image.fromarray(rgba, 'RGBA').save(buf, 'PNG')
    return buf.getvalue()


def _png(width, height, seed):
    buf = io.BytesIO()
    Image.fromarray(smooth_pixels(height, width, seed)).save(buf, 'PNG')
    return buf.getvalue()


PLACEHOLDER = _png(120, 90, seed=42)   # what "missing" photos redirect to
KNOWN_PLACEHOLDER = _png(64, 64, seed=43)  # served by one URL; its hash is passed in
DUPLICATE = _jpeg(90, 70, seed=44)        # a genuine re-upload: two URLs, same bytes
_large = _jpeg(1000, 600, seed=6)

# path -> (status, headers, body) or a special handler name
BODIES = {
    '/1001/100_small.jpg': _jpeg(100, 100, seed=1),
    '/1001/101_large.jpg': _jpeg(3000, 2000, seed=2),
    '/1001/102_portrait.jpg': _jpeg(800, 1200, seed=3),
    '/1001/103_grey.jpg': _jpeg(200, 150, seed=4, mode='L'),
    '/1001/104_cmyk.jpg': _jpeg(60, 30, seed=7, mode='CMYK'),
    '/1001/105_exif.jpg': _exif_rotated(800, 600),
    '/1001/106_alpha.png': _png_rgba(50, 40),
    '/1001/107_trunc_small.jpg': _jpeg(120, 100, seed=8)[:1200],
    '/1001/108_trunc_large.jpg': _large[:len(_large) // 2],
    '/1001/109_garbage.jpg': bytes(np.random.RandomState(9).randint(0, 256, 3000, np.uint8)),
    '/1001/110_html.jpg': b'<html><body>This photo is no longer available</body></html>',
    '/1001/111_empty.jpg': b'',
    '/1002/120_dup_a.jpg': DUPLICATE,
    '/1002/121_dup_b.jpg': DUPLICATE,
    '/1002/122_known.png': KNOWN_PLACEHOLDER,
    '/placeholder/photo_unavailable.png': PLACEHOLDER,
    '/1003/trickle.jpg': _jpeg(160, 120, seed=10),
    '/1007/160_thrice.jpg': _jpeg(110, 90, seed=11),
}
STATUS = {'/1004/130_404.jpg': 404, '/1004/131_500.jpg': 500}
REDIRECTS = ['/1005/14%d_gone.jpg' % i for i in range(4)]
SLOW = '/1006/150_slow.jpg'
CUT = '/1006/151_cut.jpg'
TRICKLE = '/1003/trickle.jpg'

CASES = [
    ('jpeg 100x100', '/1001/100_small.jpg', 'kept:bytes as served'),
    ('jpeg 3000x2000', '/1001/101_large.jpg', 'kept:480x320'),
    ('jpeg 800x1200', '/1001/102_portrait.jpg', 'kept:320x480'),
    ('grey jpeg 200x150', '/1001/103_grey.jpg', 'kept:bytes as served'),
    ('CMYK jpeg 60x30', '/1001/104_cmyk.jpg', 'kept:re-encoded RGB'),
    ('EXIF-rotated 800x600', '/1001/105_exif.jpg', 'kept:427x320, as coded'),
    ('PNG RGBA 50x40', '/1001/106_alpha.png', 'kept:JPEG, transparency white'),
    ('truncated jpeg 120x100', '/1001/107_trunc_small.jpg', 'skipped_by_make_tfrecords'),
    ('truncated jpeg 1000x600', '/1001/108_trunc_large.jpg', 'kept:533x320, lower half lost'),
    ('garbage bytes', '/1001/109_garbage.jpg', 'failed_to_resize'),
    ('HTML with status 200', '/1001/110_html.jpg', 'failed_to_resize'),
    ('empty body, status 200', '/1001/111_empty.jpg', 'failed_to_resize'),
    ('404', '/1004/130_404.jpg', 'failed_to_download'),
    ('500', '/1004/131_500.jpg', 'failed_to_download'),
] + [('redirect to placeholder #%d' % i, p, 'placeholder') for i, p in enumerate(REDIRECTS)] + [
    ('re-upload (same bytes, 2 URLs) a', '/1002/120_dup_a.jpg', 'kept:bytes as served'),
    ('re-upload (same bytes, 2 URLs) b', '/1002/121_dup_b.jpg', 'kept:bytes as served'),
    ('known placeholder hash', '/1002/122_known.png', 'placeholder'),
] + [('one URL listed 3 times #%d' % i, '/1007/160_thrice.jpg', 'kept:bytes as served')
     for i in range(3)] + [
    ('server silent past the timeout', SLOW, 'failed_to_download'),
    ('connection cut mid-body', CUT, 'failed_to_download'),
    ('trickling server (%d bytes / %.1f s)' % (TRICKLE_CHUNK, TRICKLE_GAP), TRICKLE,
     'kept:bytes as served'),
]


class ZooServer(object):
    """`with ZooServer() as zoo:` serves the zoo at zoo.url(path) until the block ends."""

    def __init__(self):
        self.release = threading.Event()  # set on exit: the silent handler returns
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 30  # a stuck client cannot hold a server thread forever

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                path = self.path
                if path in BODIES and path != TRICKLE:
                    return self._send(200, BODIES[path])
                if path in STATUS:
                    return self._send(STATUS[path], b'error page')
                if path in REDIRECTS:
                    self.send_response(302)
                    self.send_header('Location', '/placeholder/photo_unavailable.png')
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                if path == SLOW:  # answers nothing: the client gives up first
                    server.release.wait(SLOW_LIMIT)
                    self.close_connection = True
                    return
                if path == CUT:
                    body = BODIES['/1001/101_large.jpg']
                    self.send_response(200)
                    self.send_header('Content-Length', str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:1000])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if path == TRICKLE:
                    body = BODIES[TRICKLE]
                    self.send_response(200)
                    self.send_header('Content-Length', str(len(body)))
                    self.end_headers()
                    for start in range(0, len(body), TRICKLE_CHUNK):
                        if server.release.is_set():
                            return
                        self.wfile.write(body[start:start + TRICKLE_CHUNK])
                        self.wfile.flush()
                        time.sleep(TRICKLE_GAP)
                    return
                self._send(404, b'not in the zoo')

            def _send(self, status, body):
                self.send_response(status)
                self.send_header('Content-Type', 'image/jpeg' if status == 200 else 'text/html')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path):
        return 'http://127.0.0.1:%d%s' % (self.httpd.server_address[1], path)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
