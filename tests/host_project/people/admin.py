from django.contrib import admin

from people.models import User


@admin.register(User)
class UserAdmin(admin.ModelAdmin):
    list_display = ("email", "full_name", "is_staff", "is_active")
    search_fields = ("email", "full_name")
    filter_horizontal = ("groups", "user_permissions")
