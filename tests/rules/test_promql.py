"""The metric-name extractor the drift tests rely on."""

from tests.rules.promql import metric_names


def test_finds_names_and_ignores_functions_labels_and_keywords() -> None:
    expr = ('sum by (team) (rate(gpu_kernel_launch_calls_total{host_name=~"$host"}[5m])) '
            '/ on (team) group_left () team:x:y or vector(1) > 3.6e6 unless '
            'hw_gpu_up offset 15m and histogram_quantile(0.9, '
            'sum by (le) (rate(gpu_sync_duration_seconds_bucket[$__rate_interval])))')
    assert metric_names(expr) == {
        "gpu_kernel_launch_calls_total", "team:x:y", "hw_gpu_up",
        "gpu_sync_duration_seconds_bucket",
    }


def test_label_replace_strings_are_not_names() -> None:
    assert metric_names('label_replace(vector(4.00), "hw_name", "NVIDIA H200", "", "")') == set()
