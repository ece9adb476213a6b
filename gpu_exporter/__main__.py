from gpu_exporter.cli import run

run()
