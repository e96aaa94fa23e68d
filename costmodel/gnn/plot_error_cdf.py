#!/usr/bin/env python3
"""Plots the error CDFs of `braid gnn eval --json` runs as one SVG (like DisCo's
Fig. 9): one panel per test set, the GNN and the corrected roofline, with the
fused-op timing noise floor when the eval reports it.

  braid gnn eval --checkpoint a.pt --json > eval_a.json
  braid gnn eval --checkpoint b.pt --json > eval_b.json
  python3 costmodel/gnn/plot_error_cdf.py eval_a.json eval_b.json -o gnn_error_cdf.svg

Standard library only (no plotting package on the build machines).
"""
import argparse
import json
import os
import sys

W, H = 330, 250          # one panel
ML, MR, MT, MB = 48, 12, 28, 40
COLORS = {"gnn": "#1f77b4", "corrected_roofline": "#d62728"}
LABELS = {"gnn": "GNN", "corrected_roofline": "corrected roofline"}


def panel(x0, y0, title, curves, noise):
    """SVG for one panel: curves is {name: [fraction within 1..50%]}."""
    pw, ph = W - ML - MR, H - MT - MB
    out = [f'<g transform="translate({x0},{y0})">',
           f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="12">{title}</text>',
           f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>']

    def px(err_pct):
        return ML + pw * err_pct / 50.0

    def py(frac):
        return MT + ph * (1.0 - frac)

    for e in (0, 10, 20, 30, 40, 50):
        out.append(f'<line x1="{px(e)}" y1="{MT + ph}" x2="{px(e)}" y2="{MT + ph + 4}" stroke="#444"/>')
        out.append(f'<text x="{px(e)}" y="{MT + ph + 15}" text-anchor="middle" font-size="10">{e}</text>')
    for f in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{ML - 4}" y1="{py(f)}" x2="{ML}" y2="{py(f)}" stroke="#444"/>')
        out.append(f'<text x="{ML - 6}" y="{py(f) + 3}" text-anchor="end" font-size="10">{f:g}</text>')
        out.append(f'<line x1="{ML}" y1="{py(f)}" x2="{ML + pw}" y2="{py(f)}" stroke="#ddd"/>')
    # DisCo's mark (90% within 14%) and braid's target (90% within 10%).
    for e, dash in ((10, "2,2"), (14, "6,3")):
        out.append(f'<line x1="{px(e)}" y1="{MT}" x2="{px(e)}" y2="{MT + ph}" stroke="#999" '
                   f'stroke-dasharray="{dash}"/>')
    out.append(f'<line x1="{ML}" y1="{py(0.9)}" x2="{ML + pw}" y2="{py(0.9)}" stroke="#999" '
               f'stroke-dasharray="2,2"/>')
    out.append(f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle" font-size="10">'
               f'|predicted - measured| / measured (%)</text>')
    out.append(f'<text x="12" y="{MT + ph / 2}" font-size="10" text-anchor="middle" '
               f'transform="rotate(-90 12 {MT + ph / 2})">fraction within</text>')
    for name, cdf in curves.items():
        pts = [(px(0), py(0))] + [(px(i + 1), py(v)) for i, v in enumerate(cdf)]
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{COLORS[name]}" stroke-width="1.8"/>')
    if noise is not None:
        out.append(f'<circle cx="{px(min(50, 100 * noise["p50_error"]))}" cy="{py(0.5)}" r="3.5" '
                   f'fill="#2ca02c"/>')
        out.append(f'<circle cx="{px(min(50, 100 * noise["p90_error"]))}" cy="{py(0.9)}" r="3.5" '
                   f'fill="#2ca02c"/>')
    out.append("</g>")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("evals", nargs="+", help="`braid gnn eval --json` outputs")
    ap.add_argument("-o", "--output", required=True, help="SVG file to write")
    a = ap.parse_args()
    if os.environ.get("BRAID_PARSE_ONLY", "") not in ("", "0"):
        sys.exit(0)  # parse-only (base/command_line.h): the arguments were accepted
    panels = []
    noise = None
    for path in a.evals:
        with open(path) as f:
            j = json.load(f)
        noise = noise or j.get("noise_floor")
        split = j.get("split", "?")
        for name, part in j["sets"].items():
            curves = {k: part[k]["cdf_within_pct_1_to_50"] for k in ("gnn", "corrected_roofline")
                      if k in part}
            n = part.get("gnn", {}).get("n", "?")
            panels.append((f"split {split}: {name} (n={n})", curves))
    if not panels:
        sys.exit("no test sets in the inputs")
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    legend_h = 26
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols * W}" height="{rows * H + legend_h}" '
           f'font-family="sans-serif">', f'<rect width="100%" height="100%" fill="white"/>']
    for i, (title, curves) in enumerate(panels):
        svg += panel((i % cols) * W, legend_h + (i // cols) * H, title, curves, noise)
    x = 10
    for name in ("gnn", "corrected_roofline"):
        svg.append(f'<line x1="{x}" y1="13" x2="{x + 24}" y2="13" stroke="{COLORS[name]}" stroke-width="2"/>')
        svg.append(f'<text x="{x + 30}" y="17" font-size="11">{LABELS[name]}</text>')
        x += 60 + 7 * len(LABELS[name])
    if noise is not None:
        svg.append(f'<circle cx="{x + 4}" cy="13" r="3.5" fill="#2ca02c"/>')
        svg.append(f'<text x="{x + 12}" y="17" font-size="11">timing noise floor (p50, p90)</text>')
        x += 200
    svg.append(f'<text x="{x}" y="17" font-size="11" fill="#666">dashed: 10% and 14% error, 90%</text>')
    svg.append("</svg>")
    with open(a.output, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
