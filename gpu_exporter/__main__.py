from gpu_exporter.commands.cli import run

run()
