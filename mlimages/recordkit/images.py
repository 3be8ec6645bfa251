"""Image files for records: read, fully decoded, and returned as JPEG bytes.

JPEG files in RGB or L (grayscale) mode are kept byte for byte; anything else (PNG, GIF,
BMP, WebP, MPO, CMYK/YCCK JPEG, ...) is decoded with Pillow (first frame only), converted
to RGB and re-encoded as JPEG. Transparency is flattened onto black; CMYK uses Pillow's
plain (profile-free) conversion; 16-bit grey keeps its top 8 bits. The size is Pillow's
(EXIF orientation ignored).

Downscaling (--short_side N of make_tfrecords.py and convert_tfrecords.py): an image
whose shorter side exceeds N is resized to

    short' = N,  long' = max(1, round(long * N / short))     (aspect kept, +-0.5 pixel)

and re-encoded as JPEG at `jpeg_quality`; an image with short <= N is kept as it is (byte
for byte). The resampling is antialiased in two steps:
  1. a JPEG is decoded with libjpeg's DCT-domain scaling (Pillow's draft()) by the largest
     factor 1/2, 1/4 or 1/8 that leaves both sides >= 2x the target; that scaling averages
     each 8x8 block in the frequency domain (a low-pass, no aliasing) and skips most of the
     inverse DCT and colour conversion work of a 10 MP photo;
  2. Lanczos (a = 3, support scaled with the reduction, so antialiased) from there to the
     target size: the final 2-4x reduction, where the filter decides what survives.
The 2x margin keeps step 1's block averaging away from the target's passband, so the
result is Lanczos from the full image within JPEG noise (tests/test_images.py). Non-JPEG
images skip step 1.
"""
import io

import numpy as np
from PIL import Image
from mlimages.errors import BadImageError


def _describe(exc):
    text = str(exc) or type(exc).__name__
    return ' '.join(text.split())  # the report has one line per image


def _to_rgb(img):
    """An RGB copy of a decoded Pillow image; transparency is flattened onto black."""
    mode = img.mode
    if mode == 'RGB':
        return img
    if mode.startswith('I;16'):
        grey = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
        return Image.fromarray(grey, 'L').convert('RGB')
    if mode in ('I', 'F'):
        values = np.asarray(img, dtype=np.float64)
        peak = values.max() if values.size else 0
        if peak > 255:  # wider than 8 bits (16-bit PNG/TIFF): rescale, don't clip to white
            values = values * (255.0 / (65535.0 if peak <= 65535 else peak))
        grey = np.clip(np.rint(values), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, 'L').convert('RGB')
    has_alpha = (mode in ('RGBA', 'RGBa', 'LA', 'La', 'PA')
                 or (mode == 'P' and 'transparency' in img.info))
    if has_alpha:
        rgba = img.convert('RGBA')
        flat = Image.new('RGB', img.size, (0, 0, 0))
        flat.paste(rgba, mask=rgba.getchannel('A'))
        return flat
    return img.convert('RGB')


def downscaled_size(width, height, short_side):
    """(width, height) with the shorter side short_side, the aspect kept (module
    docstring); the size itself when short_side is 0 or the shorter side is <= it."""
    short = min(width, height)
    if not short_side or short <= short_side:
        return width, height
    scale = short_side / float(short)
    if width <= height:
        return short_side, max(1, int(round(height * scale)))
    return max(1, int(round(width * scale))), short_side


def _open(data):
    """A Pillow image of encoded bytes, not yet decoded; BadImageError if unidentifiable."""
    try:
        return Image.open(io.BytesIO(data))
    except Image.UnidentifiedImageError:
        raise BadImageError('not an image Pillow can identify') from None
    except Image.DecompressionBombError as exc:
        raise BadImageError('too many pixels: %s' % _describe(exc)) from None
    except Exception as exc:
        raise BadImageError('cannot decode image: %s' % _describe(exc)) from None


def _decode(img):
    """img.load() with Pillow's many exception types turned into BadImageError."""
    try:
        img.load()
    except Image.DecompressionBombError as exc:
        raise BadImageError('too many pixels: %s' % _describe(exc)) from None
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, ...)
        raise BadImageError('cannot decode image: %s' % _describe(exc)) from None


def _shrunk_jpeg(img, size, jpeg_quality):
    """JPEG bytes of the not yet decoded image `img` resized to `size` (module docstring);
    grey stays grey, everything else becomes RGB."""
    width, height = size
    box = None
    if img.format == 'JPEG':
        # The scaled decode rounds its size up: `box` is the original image in it.
        drafted = img.draft(img.mode, (2 * width, 2 * height))
        box = drafted[1] if drafted else None
    _decode(img)
    try:
        if img.mode != 'L':
            img = _to_rgb(img)
        img = img.resize(size, Image.LANCZOS, box=box)
        out = io.BytesIO()
        img.save(out, format='JPEG', quality=jpeg_quality)
    except Exception as exc:
        raise BadImageError('cannot downscale %s image in mode %s: %s'
                            % (img.format, img.mode, _describe(exc))) from None
    return out.getvalue()


def downscale(data, short_side, jpeg_quality=95):
    """Encoded image bytes -> (bytes, width, height, downscaled).

    An image whose shorter side exceeds short_side (> 0) is resized to it and re-encoded
    as JPEG (module docstring), downscaled True; any other image is fully decoded (so a
    broken one is caught) and returned byte for byte, downscaled False. Raises
    BadImageError(reason) for bytes that cannot be decoded.
    """
    if not data:
        raise BadImageError('empty image (0 bytes)')
    img = _open(data)
    width, height = img.size
    size = downscaled_size(width, height, short_side)
    if size == (width, height):
        _decode(img)
        return data, width, height, False
    return (_shrunk_jpeg(img, size, jpeg_quality),) + size + (True,)


def load_image(path, jpeg_quality=95, short_side=0):
    """Read one image file and return (jpeg_bytes, width, height).

    An RGB or greyscale JPEG is returned byte for byte; any other image is converted to
    RGB (see the module docstring) and re-encoded as JPEG at `jpeg_quality`. With
    short_side > 0 an image whose shorter side exceeds it is downscaled (downscale());
    width and height are those of the returned image. The file
    is always fully decoded, so truncated files are caught here rather than in
    training. Raises BadImageError(reason) for a missing, empty, unreadable or
    undecodable file.
    """
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        raise BadImageError('file not found') from None
    except IsADirectoryError:
        raise BadImageError('is a directory, not an image file') from None
    except OSError as exc:
        raise BadImageError('cannot read file: %s' % _describe(exc)) from None
    if not data:
        raise BadImageError('empty file (0 bytes)')
    return record_image(data, jpeg_quality, short_side)


def record_image(data, jpeg_quality=95, short_side=0):
    """load_image for the bytes of an image file (a member of a tar archive, say)."""
    if not data:
        raise BadImageError('empty image (0 bytes)')
    img = _open(data)
    width, height = img.size
    size = downscaled_size(width, height, short_side)
    if size != (width, height):
        return (_shrunk_jpeg(img, size, jpeg_quality),) + size
    _decode(img)
    if img.format == 'JPEG' and img.mode in ('RGB', 'L'):
        return data, width, height
    try:
        rgb = _to_rgb(img)
        out = io.BytesIO()
        rgb.save(out, format='JPEG', quality=jpeg_quality)
    except Exception as exc:
        raise BadImageError('cannot convert %s image in mode %s to RGB JPEG: %s'
                            % (img.format, img.mode, _describe(exc))) from None
    return out.getvalue(), width, height
