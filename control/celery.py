import os
import warnings

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import celeryd_init
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")

app = Celery("control")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_init.connect
def _quiet_root_warning(**kwargs: object) -> None:
    # Development's worker (`make run`) runs as whoever started it, root in a container, and
    # accepts JSON only (with pickle Celery would refuse root outright): the warning tells a
    # developer nothing to act on. Deployments keep it (their units run as a user of their own).
    if settings.DEBUG:
        warnings.filterwarnings("ignore", category=SecurityWarning, module="celery.platforms")
