"""Image files for records: read, fully decoded, and returned as JPEG bytes.

JPEG files in RGB or L (grayscale) mode are kept byte for byte; anything else (PNG, GIF,
BMP, WebP, MPO, CMYK/YCCK JPEG, ...) is decoded with Pillow (first frame only), converted
to RGB and re-encoded as JPEG. Transparency is flattened onto black; CMYK uses Pillow's
plain (profile-free) conversion; 16-bit grey keeps its top 8 bits. The size is Pillow's
(EXIF orientation ignored).
"""
import io

import numpy as np
from PIL import Image


class BadImageError(ValueError):
    """An image file that is missing or cannot be decoded; str() is the reason."""



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


def load_image(path, jpeg_quality=95):
    """Read one image file and return (jpeg_bytes, width, height).

    An RGB or greyscale JPEG is returned byte for byte; any other image is converted to
    RGB (see the module docstring) and re-encoded as JPEG at `jpeg_quality`. The file
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
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Image.UnidentifiedImageError:
        raise BadImageError('not an image Pillow can identify') from None
    except Image.DecompressionBombError as exc:
        raise BadImageError('too many pixels: %s' % _describe(exc)) from None
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, ...)
        raise BadImageError('cannot decode image: %s' % _describe(exc)) from None
    width, height = img.size
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
