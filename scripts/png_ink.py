#!/usr/bin/env python3
"""Is a PNG blank? For the test of `bench --plot` (tests/cli_bench_plot.rs),
which screenshots the SVG in headless Chromium: a plot that a browser does
not draw comes out as a white page.

usage:
  png_ink.py PNG [--expect-colour RRGGBB]...
                               print the share of non-white pixels and the
                               number of distinct colours; exit 0 when the
                               image has ink, 1 when it is blank (under 1 %
                               non-white, or under 3 colours) or has no pixel
                               of an expected colour (within 8 per channel),
                               2 when it cannot be read
  png_ink.py --write-blank PNG [WIDTH HEIGHT]
                               write an all-white RGB PNG (default 200 x 100)
  png_ink.py --self-test       encode images with every filter type (0-4) as
                               RGB and RGBA, check they decode to what was
                               encoded and that blank and inked images are
                               judged so; exit 0 when all holds

Standard library only: the PNG is decoded here with zlib (8-bit greyscale,
grey with alpha, RGB and RGBA, not interlaced; pixels with alpha are
composed over white, as a browser shows them).
"""

import struct
import sys
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type: channels per pixel
MIN_INK = 0.01
MIN_COLOURS = 3


class PngError(Exception):
    pass


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    if pb <= pc:
        return b
    return c


def unfilter(data, width, height, bpp):
    """The raw scanlines of `data` (each a filter byte then the row), one
    bytearray per row."""
    stride = width * bpp
    if len(data) < height * (stride + 1):
        raise PngError("image data is shorter than its size says")
    rows = []
    prior = bytearray(stride)
    pos = 0
    for _ in range(height):
        kind = data[pos]
        row = bytearray(data[pos + 1:pos + 1 + stride])
        pos += stride + 1
        if kind == 0:
            pass
        elif kind == 1:  # Sub
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 0xFF
        elif kind == 2:  # Up
            for i in range(stride):
                row[i] = (row[i] + prior[i]) & 0xFF
        elif kind == 3:  # Average
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + ((left + prior[i]) >> 1)) & 0xFF
        elif kind == 4:  # Paeth
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                upper_left = prior[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + paeth(left, prior[i], upper_left)) & 0xFF
        else:
            raise PngError(f"unknown filter type {kind}")
        rows.append(row)
        prior = row
    return rows


def decode(blob):
    """(width, height, rows of (r, g, b) tuples) of a PNG file's bytes."""
    if not blob.startswith(SIGNATURE):
        raise PngError("not a PNG (no signature)")
    pos, header, idat = len(SIGNATURE), None, []
    while pos + 8 <= len(blob):
        (length,) = struct.unpack(">I", blob[pos:pos + 4])
        kind = blob[pos + 4:pos + 8]
        body = blob[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise PngError("no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace != 0:
        raise PngError(
            f"unsupported: bit depth {depth}, colour type {colour}, interlace {interlace} "
            "(8-bit grey, RGB or RGBA, not interlaced only)")
    try:
        data = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise PngError(f"bad image data: {e}") from e
    bpp = CHANNELS[colour]
    pixels = []
    for row in unfilter(data, width, height, bpp):
        out = []
        for i in range(0, len(row), bpp):
            px = row[i:i + bpp]
            if colour in (0, 4):
                rgb, alpha = (px[0], px[0], px[0]), (px[1] if colour == 4 else 255)
            else:
                rgb, alpha = (px[0], px[1], px[2]), (px[3] if colour == 6 else 255)
            if alpha != 255:  # over white
                rgb = tuple((c * alpha + 255 * (255 - alpha)) // 255 for c in rgb)
            out.append(rgb)
        pixels.append(out)
    return width, height, pixels


def ink(pixels):
    """(share of pixels that are not white, number of distinct colours)."""
    total, inked, colours = 0, 0, set()
    for row in pixels:
        for px in row:
            total += 1
            if px != (255, 255, 255):
                inked += 1
            colours.add(px)
    return (inked / total if total else 0.0), len(colours)


def encode(width, height, pixels, alpha=False, filters=(0,)):
    """A PNG of `pixels` (rows of (r, g, b) or (r, g, b, a)), row i filtered
    with filter type filters[i % len(filters)]."""
    bpp = 4 if alpha else 3
    raw, prior = bytearray(), bytearray(width * bpp)
    for y, row in enumerate(pixels):
        line = bytearray(v for px in row for v in px)
        kind = filters[y % len(filters)]
        out = bytearray()
        for i, v in enumerate(line):
            left = line[i - bpp] if i >= bpp else 0
            upper_left = prior[i - bpp] if i >= bpp else 0
            predicted = [0, left, prior[i], (left + prior[i]) >> 1,
                         paeth(left, prior[i], upper_left)][kind]
            out.append((v - predicted) & 0xFF)
        raw += bytes([kind]) + out
        prior = line

    def chunk(kind, body):
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 6 if alpha else 2, 0, 0, 0)
    return (SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw)))
            + chunk(b"IEND", b""))


def blank(width, height):
    return encode(width, height, [[(255, 255, 255)] * width for _ in range(height)])


def pixels_of(pixels, rgb, tolerance=8):
    """How many pixels are within `tolerance` of `rgb` in every channel."""
    return sum(1 for row in pixels for px in row
               if all(abs(a - b) <= tolerance for a, b in zip(px, rgb)))


def judge(path, expected=()):
    try:
        with open(path, "rb") as f:
            width, height, pixels = decode(f.read())
    except (OSError, PngError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 2
    share, colours = ink(pixels)
    verdict = "blank" if share < MIN_INK or colours < MIN_COLOURS else "has ink"
    print(f"{path}: {width}x{height}, {share * 100:.2f}% non-white, {colours} colours: {verdict}")
    missing = False
    for hex_colour in expected:
        found = pixels_of(pixels, tuple(bytes.fromhex(hex_colour)))
        print(f"{path}: {found} pixels of #{hex_colour}")
        missing = missing or found == 0
    return 1 if verdict == "blank" or missing else 0


def self_test():
    failures = []
    width, height = 7, 10
    # A gradient with a diagonal: every filter has something to predict.
    rgba = [[((x * 37 + y * 11) % 256, (x * y * 5) % 256, 255 - x * 20, 128 + x * 10)
             for x in range(width)] for y in range(height)]
    for alpha in (False, True):
        image = [[px if alpha else px[:3] for px in row] for row in rgba]
        for filters in [(0,), (1,), (2,), (3,), (4,), (0, 1, 2, 3, 4)]:
            _, _, got = decode(encode(width, height, image, alpha, filters))
            want = [[(px[0], px[1], px[2]) if not alpha else
                     tuple((c * px[3] + 255 * (255 - px[3])) // 255 for c in px[:3])
                     for px in row] for row in image]
            if got != want:
                failures.append(f"filters {filters}, alpha {alpha}: decoded wrong")
    share, colours = ink(decode(blank(20, 10))[2])
    if (share, colours) != (0.0, 1):
        failures.append(f"a white image: {share} non-white, {colours} colours")
    dotted = [[(255, 255, 255)] * 10 for _ in range(10)]
    dotted[2][3], dotted[5][5] = (255, 0, 0), (0, 0, 255)
    dots = decode(encode(10, 10, dotted, False, (4,)))[2]
    share, colours = ink(dots)
    if (share, colours) != (0.02, 3):
        failures.append(f"two dots: {share} non-white, {colours} colours")
    if (pixels_of(dots, (250, 5, 3)), pixels_of(dots, (0, 255, 0))) != (1, 0):
        failures.append("the red dot is not found by its colour, or a green one is")
    try:
        decode(b"GIF89a")
        failures.append("a GIF was read as a PNG")
    except PngError:
        pass
    for f in failures:
        print(f"self-test: {f}", file=sys.stderr)
    print(f"self-test: {'failed' if failures else 'ok'}")
    return 1 if failures else 0


def main(args):
    if args == ["--self-test"]:
        return self_test()
    if args and args[0] == "--write-blank" and len(args) in (2, 4):
        width, height = (int(args[2]), int(args[3])) if len(args) == 4 else (200, 100)
        with open(args[1], "wb") as f:
            f.write(blank(width, height))
        return 0
    if args and not args[0].startswith("--"):
        path, rest, expected = args[0], args[1:], []
        while len(rest) >= 2 and rest[0] == "--expect-colour" and len(rest[1]) == 6:
            try:
                bytes.fromhex(rest[1])
            except ValueError:
                break
            expected.append(rest[1].lower())
            rest = rest[2:]
        if not rest:
            return judge(path, expected)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
