from rest_framework.routers import DefaultRouter

from . import views

app_name = "api"

router = DefaultRouter()
router.register("health", views.HealthViewSet, basename="health")

urlpatterns = router.urls
