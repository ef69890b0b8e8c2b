"""Replay: send a call's recorded (or re-rendered) request again and compare.

Modes (``bodies``), how faithful a replay is (``fidelity``), candidates
(``candidates``), the per-call comparison (``compare``), stratified sampling
(``sampling``), agent-session state replay (``state``), the day's replay of a
candidate (``day``) and the per-segment summary with its tests (``summary``).
No module here imports dagster; ``assets/replay.py`` wires them.
"""
